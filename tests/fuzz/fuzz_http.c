/* Fuzz target: what remote servers send (Content-Range, header lines,
 * ETags stating a SHA-256, Retry-After, S3's XML error bodies) and the URLs
 * ckpt is given (split, redacted, credentials taken out, encoded).  The first byte picks the
 * parser; the rest is its text. */
#include <stdlib.h>
#include <string.h>

#include "fuzz_common.h"
#include "io/http.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    unsigned which = data[0] % 7;
    const char *text = (const char *)data + 1;
    size_t n = size - 1;
    char *z = malloc(n + 1); /* NUL-terminated copy for the URL functions */
    if (!z) return 0;
    memcpy(z, text, n);
    z[n] = '\0';
    switch (which) {
    case 0: {
        ckpt__content_range r;
        if (ckpt__parse_content_range(text, n, &r)) {
            if (r.has_range && r.last < r.first) abort();
            if (r.has_range && r.has_total && r.last >= r.total) abort();
            if (!r.has_range && !r.has_total) abort();
        }
        break;
    }
    case 1: {
        const char *name, *value;
        size_t nl, vl;
        if (ckpt__split_header(text, n, &name, &nl, &value, &vl)) {
            if (name < text || name + nl > text + n || value < text || value + vl > text + n) abort();
            (void)ckpt__header_is(name, nl, "Content-Range");
        }
        char sha[65];
        if (ckpt__etag_sha256(text, n, sha) && strspn(sha, "0123456789abcdef") != 64) abort();
        break;
    }
    case 2: {
        unsigned s;
        if (ckpt__parse_retry_after(text, n, 60, &s) && s > 60) abort();
        break;
    }
    case 3: {
        char out[64];
        if (ckpt__xml_element(text, n, "Code", out, sizeof out) && strlen(out) >= sizeof out) abort();
        if (ckpt__store_error_text(text, n, out, sizeof out) >= sizeof out || strlen(out) >= sizeof out) abort();
        break;
    }
    case 5: { /* a store's listing: every <Key>, each decoded no longer than it was written */
        ckpt__buf item = {0};
        size_t last = 0;
        for (size_t pos = 0; ckpt__xml_next(text, n, "Key", &pos, &item);) {
            if (pos > n || pos <= last || item.len > n) abort();
            last = pos;
        }
        free(item.data);
        break;
    }
    case 4: {
        char *r = ckpt__url_redact(z);
        char shown[32];
        /* The public form: the same text, its whole length, cut to fit. */
        if (r && (ckpt_redact_name(z, shown, sizeof shown) != strlen(r) || strncmp(shown, r, sizeof shown - 1)))
            abort();
        free(r);
        char *clean, *info;
        if (ckpt__url_take_userinfo(z, &clean, &info)) {
            if (info && strchr(clean, '@') && !strchr(z + (strstr(z, "://") ? 3 : 0), '@')) abort();
            free(clean);
            free(info);
        }
        ckpt__url_parts u;
        if (ckpt__url_split(z, &u) && (u.host < z || u.host + u.host_len > z + n)) abort();
        break;
    }
    default: {
        ckpt__buf b = {0};
        ckpt__url_encode_into(&b, text, n, "+");
        for (size_t i = 0; b.data && i < b.len; i++)
            if ((unsigned char)b.data[i] <= 0x20 || (unsigned char)b.data[i] >= 0x7f) abort();
        free(b.data);
        break;
    }
    }
    free(z);
    return 0;
}
