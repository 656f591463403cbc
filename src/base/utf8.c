/* utf8.c — UTF-8 validation (names, metadata, pickled strings). */
#include <string.h>

#include "base.h"

#define HIGHS 0x8080808080808080ULL

size_t ckpt__utf8_check(const unsigned char *s, size_t len) {
    size_t i = 0;
    while (i < len) {
        unsigned char c = s[i];
        if (c < 0x80) {
            i++;
            while (len - i >= 8) { /* ASCII runs eight bytes at a time */
                uint64_t v;
                memcpy(&v, s + i, 8);
                if (v & HIGHS) break;
                i += 8;
            }
            continue;
        }
        size_t need;
        unsigned cp, min;
        if (c >= 0xC2 && c <= 0xDF) need = 1, cp = c & 0x1F, min = 0x80;
        else if (c >= 0xE0 && c <= 0xEF) need = 2, cp = c & 0x0F, min = 0x800;
        else if (c >= 0xF0 && c <= 0xF4) need = 3, cp = c & 0x07, min = 0x10000;
        else return i;
        if (len - i <= need) return i;
        for (size_t k = 1; k <= need; k++) {
            if ((s[i + k] & 0xC0) != 0x80) return i;
            cp = (cp << 6) | (s[i + k] & 0x3F);
        }
        if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return i;
        i += need + 1;
    }
    return len;
}
