/* buf.c — growable output buffers, and numbers as text. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base.h"

void ckpt__buf_append(ckpt__buf *b, const char *s, size_t n) {
    if (b->failed) return;
    if (b->cap - b->len < n + 1) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap - b->len < n + 1) cap *= 2;
        char *d = ckpt__realloc(b->data, cap);
        if (!d) {
            b->failed = true;
            return;
        }
        b->data = d;
        b->cap = cap;
    }
    memcpy(b->data + b->len, s, n);
    b->len += n;
    b->data[b->len] = '\0';
}

void ckpt__buf_puts(ckpt__buf *b, const char *s) { ckpt__buf_append(b, s, strlen(s)); }

char *ckpt__buf_text(ckpt__buf *b) {
    if (!b->data) ckpt__buf_append(b, "", 0);
    if (!b->failed) return b->data;
    free(b->data);
    return NULL;
}

void ckpt__buf_u64(ckpt__buf *b, uint64_t v) {
    char tmp[24];
    size_t n = sizeof tmp;
    do {
        tmp[--n] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    ckpt__buf_append(b, tmp + n, sizeof tmp - n);
}

void ckpt__shortest_float(char *out, size_t cap, double v, bool single) {
    /* FLT_DIG (6) and DBL_DIG (15) digits always read back as what they
     * print; fewer digits would too only where those print trailing zeros,
     * which %g drops.  So the first count that reads back is the shortest. */
    for (int digits = single ? 6 : 15; digits <= (single ? 9 : 17); digits++) {
        snprintf(out, cap, "%.*g", digits, v);
        if (single ? strtof(out, NULL) == (float)v : strtod(out, NULL) == v) return;
    }
}
