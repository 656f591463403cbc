/* base64.c — Base64 (RFC 4648), standard and URL-safe (see base64.h). */
#include "base64.h"

static const char std_digits[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
static const char url_digits[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

void ckpt__base64_encode(ckpt__buf *b, const void *data, size_t n, bool url) {
    const unsigned char *p = data;
    const char *d = url ? url_digits : std_digits;
    for (size_t i = 0; i < n; i += 3) {
        unsigned v = (unsigned)p[i] << 16 | (i + 1 < n ? (unsigned)p[i + 1] << 8 : 0) | (i + 2 < n ? p[i + 2] : 0);
        char out[4] = {d[v >> 18 & 63], d[v >> 12 & 63], d[v >> 6 & 63], d[v & 63]};
        size_t keep = i + 2 < n ? 4 : i + 1 < n ? 3 : 2;
        if (!url) for (size_t k = keep; k < 4; k++) out[k] = '=';
        ckpt__buf_append(b, out, url ? keep : 4);
    }
}

static int digit_value(char c) {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
}

bool ckpt__base64_decode(ckpt__buf *b, const char *text, size_t len) {
    while (len && text[len - 1] == '=') len--;
    if (len % 4 == 1) return false;
    unsigned v = 0, bits = 0;
    for (size_t i = 0; i < len; i++) {
        int d = digit_value(text[i]);
        if (d < 0) return false;
        v = (v << 6 | (unsigned)d) & 0xffffff;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            char c = (char)(v >> bits & 0xff);
            ckpt__buf_append(b, &c, 1);
        }
    }
    return !b->failed;
}
