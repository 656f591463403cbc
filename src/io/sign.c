/*
 * sign.c — request signatures the object stores check that libcurl does not
 * make: Azure's SharedKey (HMAC-SHA256 of a canonical string-to-sign, with
 * the account's key).  SigV4 (S3, and GCS's HMAC keys) is libcurl's own
 * (CURLOPT_AWS_SIGV4, set up by objstore.c).  Depends on base and
 * http_parse.c only.
 */
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "../base/base64.h"
#include "../base/sha256.h"
#include "http.h"

/* The value of header `name` among `lines`, trimmed, or "" (its length in *n). */
static const char *header_value(const char *const *lines, size_t count, const char *name, size_t *n) {
    size_t want = strlen(name);
    for (size_t i = 0; i < count; i++) {
        const char *l = lines[i], *colon = strchr(l, ':');
        if (!colon || (size_t)(colon - l) != want || strncasecmp(l, name, want) != 0) continue;
        const char *v = colon + 1;
        while (*v == ' ' || *v == '\t') v++;
        size_t len = strlen(v);
        while (len && (v[len - 1] == ' ' || v[len - 1] == '\t')) len--;
        *n = len;
        return v;
    }
    *n = 0;
    return "";
}

static int by_text(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* Appends `s` percent-decoded. */
static void append_decoded(ckpt__buf *b, const char *s, size_t n) {
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (c == '%' && i + 2 < n) {
            char hex[3] = {s[i + 1], s[i + 2], 0};
            char *end;
            long v = strtol(hex, &end, 16);
            if (end == hex + 2) {
                c = (char)v;
                i += 2;
            }
        } else if (c == '+') {
            c = ' ';
        }
        ckpt__buf_append(b, &c, 1);
    }
}

/* "name:value" entries, sorted, each malloc'ed: the x-ms-* headers
 * (lower-case names) or the query's parameters (lower-case names, decoded
 * values).  NULL entries when out of memory. */
static size_t canonical_headers(const char *const *lines, size_t n, char **out) {
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        const char *l = lines[i], *colon = strchr(l, ':');
        if (!colon || strncasecmp(l, "x-ms-", 5) != 0) continue;
        ckpt__buf b = {0};
        for (const char *p = l; p < colon; p++) {
            char c = (char)(*p >= 'A' && *p <= 'Z' ? *p + 32 : *p);
            ckpt__buf_append(&b, &c, 1);
        }
        const char *val = colon + 1;
        while (*val == ' ') val++;
        ckpt__buf_puts(&b, ":");
        ckpt__buf_puts(&b, val);
        out[k++] = ckpt__buf_text(&b);
    }
    return k;
}

static size_t canonical_query(const char *query, size_t len, char **out, size_t cap) {
    size_t k = 0;
    for (size_t i = 0; i < len && k < cap;) {
        size_t end = i;
        while (end < len && query[end] != '&') end++;
        const char *eq = memchr(query + i, '=', end - i);
        size_t name_end = eq ? (size_t)(eq - query) : end;
        if (name_end > i) {
            ckpt__buf b = {0};
            for (size_t p = i; p < name_end; p++) {
                char c = (char)(query[p] >= 'A' && query[p] <= 'Z' ? query[p] + 32 : query[p]);
                ckpt__buf_append(&b, &c, 1);
            }
            ckpt__buf_puts(&b, ":");
            if (eq) append_decoded(&b, eq + 1, end - name_end - 1);
            out[k++] = ckpt__buf_text(&b);
        }
        i = end + 1;
    }
    return k;
}

/* RFC 1123's date, in English whatever the locale. */
static void http_date(char out[32]) {
    static const char *const days[] = {"Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"};
    static const char *const months[] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                         "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    snprintf(out, 32, "%s, %02d %s %04d %02d:%02d:%02d GMT", days[tm.tm_wday], tm.tm_mday, months[tm.tm_mon],
             tm.tm_year + 1900, tm.tm_hour, tm.tm_min, tm.tm_sec);
}

bool ckpt__shared_key_sign(const char *account, const char *key, const char *method, const char *url,
                           const char *const *lines, size_t n, ckpt__buf *out) {
    ckpt__url_parts u;
    if (!ckpt__url_split(url, &u) || n > 60) return false;
    char date[32], date_line[48];
    http_date(date);
    snprintf(date_line, sizeof date_line, "x-ms-date: %s", date);
    const char *all[64];
    memcpy(all, lines, n * sizeof *lines);
    all[n++] = date_line;
    /* The string to sign: the verb, the standard headers in their order
     * (a GET's Content-Length is empty), the x-ms-* headers, the resource. */
    static const char *const standard[] = {"Content-Encoding", "Content-Language", "Content-Length", "Content-MD5",
                                           "Content-Type", "Date", "If-Modified-Since", "If-Match",
                                           "If-None-Match", "If-Unmodified-Since", "Range"};
    ckpt__buf s = {0};
    ckpt__buf_puts(&s, method);
    ckpt__buf_puts(&s, "\n");
    for (size_t i = 0; i < sizeof standard / sizeof *standard; i++) {
        size_t vn;
        const char *v = header_value(all, n, standard[i], &vn);
        ckpt__buf_append(&s, v, vn);
        ckpt__buf_puts(&s, "\n");
    }
    char *entries[128] = {0};
    size_t h = canonical_headers(all, n, entries);
    qsort(entries, h, sizeof *entries, by_text);
    bool ok = true;
    for (size_t i = 0; i < h; i++) {
        if (!entries[i]) ok = false;
        else ckpt__buf_puts(&s, entries[i]), ckpt__buf_puts(&s, "\n");
        free(entries[i]);
    }
    ckpt__buf_puts(&s, "/");
    ckpt__buf_puts(&s, account);
    if (u.path_len) ckpt__buf_append(&s, u.path, u.path_len);
    else ckpt__buf_puts(&s, "/");
    size_t q = canonical_query(u.query, u.query_len, entries, 128);
    qsort(entries, q, sizeof *entries, by_text);
    for (size_t i = 0; i < q; i++) {
        if (!entries[i]) ok = false;
        else ckpt__buf_puts(&s, "\n"), ckpt__buf_puts(&s, entries[i]);
        free(entries[i]);
    }
    ckpt__buf k = {0};
    ok = ok && !s.failed && ckpt__base64_decode(&k, key, strlen(key)) && k.len;
    if (ok) {
        unsigned char mac[32];
        ckpt__hmac_sha256(k.data, k.len, s.data, s.len, mac);
        ckpt__buf_puts(out, date_line);
        ckpt__buf_puts(out, "\nAuthorization: SharedKey ");
        ckpt__buf_puts(out, account);
        ckpt__buf_puts(out, ":");
        ckpt__base64_encode(out, mac, sizeof mac, false);
        ckpt__buf_puts(out, "\n");
        ok = !out->failed;
    }
    if (k.data) memset(k.data, 0, k.len), free(k.data);
    free(s.data);
    return ok;
}
