/* http_parse.c — the text a server sends (headers, Content-Range, S3 error
 * bodies) and URLs, parsed without trusting any of it.  No libcurl: built
 * in every configuration, and fuzzed (tests/fuzz/fuzz_http.c). */
#include <stdlib.h>
#include <string.h>

#include "http.h"

static bool is_blank(char c) { return c == ' ' || c == '\t'; }
static bool is_digit(char c) { return c >= '0' && c <= '9'; }
static char lower(char c) { return c >= 'A' && c <= 'Z' ? (char)(c - 'A' + 'a') : c; }

/* Digits at s[*i..len) as a u64; false when there are none or they overflow. */
static bool parse_u64(const char *s, size_t len, size_t *i, uint64_t *out) {
    size_t start = *i;
    uint64_t v = 0;
    while (*i < len && is_digit(s[*i])) {
        if (!ckpt__mul_u64(v, 10, &v) || !ckpt__add_u64(v, (uint64_t)(s[*i] - '0'), &v)) return false;
        (*i)++;
    }
    *out = v;
    return *i > start;
}

bool ckpt__parse_content_range(const char *s, size_t len, ckpt__content_range *out) {
    memset(out, 0, sizeof *out);
    size_t i = 0;
    while (i < len && is_blank(s[i])) i++;
    static const char unit[] = "bytes";
    if (len - i < sizeof unit - 1) return false;
    for (size_t k = 0; k < sizeof unit - 1; k++)
        if (lower(s[i + k]) != unit[k]) return false;
    i += sizeof unit - 1;
    if (i >= len || !is_blank(s[i])) return false;
    while (i < len && is_blank(s[i])) i++;
    if (i < len && s[i] == '*') {
        i++;
    } else {
        if (!parse_u64(s, len, &i, &out->first) || i >= len || s[i] != '-') return false;
        i++;
        if (!parse_u64(s, len, &i, &out->last) || out->last < out->first) return false;
        out->has_range = true;
    }
    if (i >= len || s[i] != '/') return false;
    i++;
    if (i < len && s[i] == '*') {
        i++;
        if (!out->has_range) return false; /* "*" over "*" says nothing */
    } else {
        if (!parse_u64(s, len, &i, &out->total)) return false;
        out->has_total = true;
        if (out->has_range && out->last >= out->total) return false;
    }
    while (i < len && is_blank(s[i])) i++;
    return i == len;
}

bool ckpt__split_header(const char *line, size_t len, const char **name, size_t *name_len, const char **value,
                        size_t *value_len) {
    while (len && (line[len - 1] == '\n' || line[len - 1] == '\r')) len--;
    const char *colon = memchr(line, ':', len);
    if (!colon || colon == line) return false;
    size_t n = (size_t)(colon - line);
    for (size_t k = 0; k < n; k++)
        if (is_blank(line[k]) || (unsigned char)line[k] < 0x21) return false; /* a status line, or junk */
    const char *v = colon + 1, *end = line + len;
    while (v < end && is_blank(*v)) v++;
    while (end > v && is_blank(end[-1])) end--;
    *name = line;
    *name_len = n;
    *value = v;
    *value_len = (size_t)(end - v);
    return true;
}

bool ckpt__header_is(const char *name, size_t name_len, const char *want) {
    size_t n = strlen(want);
    if (name_len != n) return false;
    for (size_t k = 0; k < n; k++)
        if (lower(name[k]) != lower(want[k])) return false;
    return true;
}

bool ckpt__parse_retry_after(const char *value, size_t len, unsigned cap, unsigned *seconds) {
    size_t i = 0;
    uint64_t v;
    if (!parse_u64(value, len, &i, &v)) {
        /* Only a run of digits too long for a u64 is a number; anything
         * else (an HTTP date) is not understood. */
        while (i < len && is_digit(value[i])) i++;
        if (i == 0 || i != len) return false;
        *seconds = cap;
        return true;
    }
    if (i != len) return false;
    *seconds = v > cap ? cap : (unsigned)v;
    return true;
}

bool ckpt__etag_sha256(const char *etag, size_t len, char out[65]) {
    /* huggingface_hub's reading: W/ and the quotes dropped, then exactly
     * 64 lower-case hex digits. */
    if (len >= 2 && etag[0] == 'W' && etag[1] == '/') etag += 2, len -= 2;
    if (len >= 2 && etag[0] == '"' && etag[len - 1] == '"') etag++, len -= 2;
    if (len != 64) return false;
    for (size_t k = 0; k < 64; k++)
        if (!is_digit(etag[k]) && !(etag[k] >= 'a' && etag[k] <= 'f')) return false;
    memcpy(out, etag, 64);
    out[64] = '\0';
    return true;
}

bool ckpt__xml_element(const char *body, size_t len, const char *tag, char *out, size_t cap) {
    if (!cap) return false;
    out[0] = '\0';
    size_t t = strlen(tag);
    for (size_t i = 0; i + t + 2 <= len; i++) {
        if (body[i] != '<' || memcmp(body + i + 1, tag, t) != 0 || body[i + 1 + t] != '>') continue;
        size_t start = i + t + 2, end = start;
        while (end < len && body[end] != '<') end++;
        size_t n = 0;
        for (size_t k = start; k < end && n + 1 < cap; k++)
            out[n++] = (unsigned char)body[k] < 0x20 || body[k] == 0x7f ? ' ' : body[k];
        out[n] = '\0';
        return true;
    }
    return false;
}

/* RFC 3986's scheme: a letter, then letters, digits, '+', '-' or '.' (so
 * that a local path holding "://" after a '/' is not taken for a URL). */
static bool is_scheme(const char *s, size_t n) {
    if (!n || !((s[0] >= 'a' && s[0] <= 'z') || (s[0] >= 'A' && s[0] <= 'Z'))) return false;
    for (size_t k = 1; k < n; k++) {
        char c = lower(s[k]);
        if (!((c >= 'a' && c <= 'z') || is_digit(c) || c == '+' || c == '-' || c == '.')) return false;
    }
    return true;
}

bool ckpt__url_split(const char *url, ckpt__url_parts *out) {
    memset(out, 0, sizeof *out);
    const char *sep = strstr(url, "://");
    if (!sep || !is_scheme(url, (size_t)(sep - url))) return false;
    out->scheme = url;
    out->scheme_len = (size_t)(sep - url);
    const char *a = sep + 3;
    size_t auth_len = strcspn(a, "/?#");
    const char *at = NULL;
    for (size_t k = 0; k < auth_len; k++)
        if (a[k] == '@') at = a + k; /* the last '@' ends the userinfo */
    if (at) {
        out->userinfo = a;
        out->userinfo_len = (size_t)(at - a);
        out->host = at + 1;
        out->host_len = auth_len - out->userinfo_len - 1;
    } else {
        out->host = a;
        out->host_len = auth_len;
    }
    if (!out->host_len) return false;
    const char *p = a + auth_len;
    out->path = p;
    out->path_len = strcspn(p, "?#");
    if (p[out->path_len] == '?') {
        out->query = p + out->path_len + 1;
        out->query_len = strcspn(out->query, "#");
    }
    return true;
}

/* Query parameters whose values are credentials (compared without case). */
static bool secret_param(const char *name, size_t len) {
    static const char *const names[] = {
        "x-amz-signature", "x-amz-credential", "x-amz-security-token", "signature", "sig", "token",
        "access_token", "x-goog-signature", "x-goog-credential", "key", "api_key", "apikey", "password",
        "secret", "auth", "authorization", "policy", "se", "sv", "sp",
    };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (ckpt__header_is(name, len, names[i])) return true;
    return false;
}

char *ckpt__url_redact(const char *url) {
    ckpt__url_parts u;
    if (!ckpt__url_split(url, &u)) return ckpt__strdup(url);
    ckpt__buf b = {0};
    ckpt__buf_append(&b, url, u.scheme_len + 3);
    /* The whole user part: "user:password", and a bare token ("ghp_…@",
     * which libcurl sends as a user name) alike. */
    if (u.userinfo) ckpt__buf_puts(&b, "REDACTED@");
    ckpt__buf_append(&b, u.host, u.host_len);
    ckpt__buf_append(&b, u.path, u.path_len);
    if (u.query) {
        ckpt__buf_puts(&b, "?");
        const char *q = u.query, *end = u.query + u.query_len;
        while (q < end) {
            const char *amp = memchr(q, '&', (size_t)(end - q));
            const char *stop = amp ? amp : end;
            const char *eq = memchr(q, '=', (size_t)(stop - q));
            if (eq && secret_param(q, (size_t)(eq - q))) {
                ckpt__buf_append(&b, q, (size_t)(eq - q) + 1);
                ckpt__buf_puts(&b, "REDACTED");
            } else {
                ckpt__buf_append(&b, q, (size_t)(stop - q));
            }
            if (amp) ckpt__buf_puts(&b, "&");
            q = amp ? amp + 1 : end;
        }
    }
    const char *frag = u.query ? u.query + u.query_len : u.path + u.path_len;
    ckpt__buf_puts(&b, frag); /* "#fragment" or nothing */
    return ckpt__buf_text(&b);
}

size_t ckpt_redact_name(const char *name, char *out, size_t cap) {
    char *r = ckpt__url_redact(name ? name : "");
    /* Out of memory: nothing of the name, rather than all of it. */
    const char *shown = r ? r : "(a name not shown: out of memory)";
    size_t n = strlen(shown);
    if (out && cap) {
        size_t k = n < cap ? n : cap - 1;
        memcpy(out, shown, k);
        out[k] = '\0';
    }
    free(r);
    return n;
}

static int hex_value(char c) {
    if (is_digit(c)) return c - '0';
    c = lower(c);
    return c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

bool ckpt__url_take_userinfo(const char *url, char **clean, char **userinfo) {
    *clean = NULL;
    *userinfo = NULL;
    ckpt__url_parts u;
    if (!ckpt__url_split(url, &u) || !u.userinfo) {
        *clean = ckpt__strdup(url);
        return *clean != NULL;
    }
    size_t head = (size_t)(u.userinfo - url), tail = strlen(u.host);
    char *c = ckpt__malloc(head + tail + 1);
    char *info = ckpt__malloc(u.userinfo_len + 1);
    if (!c || !info) {
        free(c);
        free(info);
        return false;
    }
    memcpy(c, url, head);
    memcpy(c + head, u.host, tail + 1);
    size_t n = 0;
    for (size_t k = 0; k < u.userinfo_len; k++) {
        int hi, lo;
        if (u.userinfo[k] == '%' && k + 2 < u.userinfo_len && (hi = hex_value(u.userinfo[k + 1])) >= 0 &&
            (lo = hex_value(u.userinfo[k + 2])) >= 0) {
            info[n++] = (char)(hi * 16 + lo);
            k += 2;
        } else {
            info[n++] = u.userinfo[k];
        }
    }
    info[n] = '\0';
    *clean = c;
    *userinfo = info;
    return true;
}

void ckpt__url_encode_into(ckpt__buf *b, const char *s, size_t len, const char *extra) {
    static const char hex[] = "0123456789ABCDEF";
    for (size_t k = 0; k < len; k++) {
        unsigned char c = (unsigned char)s[k];
        bool plain = c > 0x20 && c < 0x7f && !strchr("\"<>\\^`{|}", c) && !(extra && strchr(extra, c));
        if (plain) {
            ckpt__buf_append(b, (const char *)&c, 1);
        } else {
            char e[3] = {'%', hex[c >> 4], hex[c & 15]};
            ckpt__buf_append(b, e, 3);
        }
    }
}

/* The character an XML entity at `s` (after its '&', `n` bytes to ';')
 * stands for, or -1 (left as it is). */
static int xml_entity(const char *s, size_t n) {
    static const struct { const char *name; char c; } named[] = {
        {"amp", '&'}, {"lt", '<'}, {"gt", '>'}, {"quot", '"'}, {"apos", '\''}};
    for (size_t i = 0; i < sizeof named / sizeof *named; i++)
        if (strlen(named[i].name) == n && !memcmp(s, named[i].name, n)) return (unsigned char)named[i].c;
    if (n >= 2 && n <= 4 && s[0] == '#') { /* &#N; of an ASCII character */
        int v = 0;
        for (size_t i = 1; i < n; i++) {
            if (!is_digit(s[i])) return -1;
            v = v * 10 + (s[i] - '0');
        }
        return v > 0 && v < 128 ? v : -1;
    }
    return -1;
}

bool ckpt__xml_next(const char *body, size_t len, const char *tag, size_t *pos, ckpt__buf *out) {
    size_t t = strlen(tag);
    for (size_t i = *pos; i + t + 2 <= len; i++) {
        if (body[i] != '<' || memcmp(body + i + 1, tag, t) != 0 || body[i + 1 + t] != '>') continue;
        size_t k = i + t + 2;
        out->len = 0;
        ckpt__buf_append(out, "", 0);
        while (k < len && body[k] != '<') {
            const char *semi = body[k] == '&' ? memchr(body + k, ';', len - k) : NULL;
            int c = semi ? xml_entity(body + k + 1, (size_t)(semi - body - k - 1)) : -1;
            char ch = c >= 0 ? (char)c : body[k];
            ckpt__buf_append(out, &ch, 1);
            k = c >= 0 ? (size_t)(semi - body) + 1 : k + 1;
        }
        *pos = k;
        return !out->failed;
    }
    *pos = len;
    return false;
}

size_t ckpt__store_error_text(const char *body, size_t len, char *out, size_t cap) {
    char code[128], message[400], more[600];
    bool has_code = ckpt__xml_element(body, len, "Code", code, sizeof code);
    bool has_message = ckpt__xml_element(body, len, "Message", message, sizeof message);
    bool has_more = ckpt__xml_element(body, len, "AuthenticationErrorDetail", more, sizeof more) ||
                    ckpt__xml_element(body, len, "Details", more, sizeof more);
    if (!cap) return 0;
    out[0] = '\0';
    if (!has_code && !has_message) return 0;
    int n = snprintf(out, cap, ": %s%s%s%s%s%s", has_code ? code : "", has_code && has_message ? ": " : "",
                     has_message ? message : "", has_more ? " (" : "", has_more ? more : "", has_more ? ")" : "");
    return n < 0 ? 0 : (size_t)n < cap ? (size_t)n : cap - 1;
}
