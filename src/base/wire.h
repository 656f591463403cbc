/*
 * wire.h — little-endian encodings for bytes that processes send each other
 * (collective operations): a growable writer over ckpt__buf, and the
 * strings read back with cursor.h's bounded reader (whose integers and
 * counts the decoders use directly).
 * Depends on base only.
 */
#ifndef CKPT_BASE_WIRE_H
#define CKPT_BASE_WIRE_H

#include <string.h>

#include "cursor.h"

/* ---- writing ------------------------------------------------------------------ */

static inline void ckpt__put_u32(ckpt__buf *b, uint32_t v) { ckpt__put_le(b, v, 4); }
static inline void ckpt__put_u64(ckpt__buf *b, uint64_t v) { ckpt__put_le(b, v, 8); }

/* A string: u32 length, then its bytes; NULL is length 0xFFFFFFFF. */
static inline void ckpt__put_str(ckpt__buf *b, const char *s) {
    if (!s) {
        ckpt__put_u32(b, UINT32_MAX);
        return;
    }
    size_t n = strlen(s);
    if (n >= UINT32_MAX) {
        b->failed = true;
        return;
    }
    ckpt__put_u32(b, (uint32_t)n);
    ckpt__buf_append(b, s, n);
}

/* ---- reading ------------------------------------------------------------------ */

/*
 * A string copied into `arena` (NUL-terminated): it must be valid UTF-8
 * without NUL bytes.  *null receives whether it was NULL (allowed only when
 * `null` is given).  Returns NULL with r->bad set on a bad string, or NULL
 * with r->bad clear when out of memory (*oom set).
 */
static inline char *ckpt__rd_str(ckpt__rd *r, ckpt__arena *arena, bool *null, bool *oom) {
    size_t start = r->at;
    uint32_t len = ckpt__rd_u32(r);
    if (r->bad) return NULL;
    if (len == UINT32_MAX) {
        if (!null) ckpt__rd_fail_at(r, start);
        else *null = true;
        return NULL;
    }
    if (null) *null = false;
    const unsigned char *s = ckpt__rd_bytes(r, len);
    if (!s) return NULL;
    if (memchr(s, 0, len) || ckpt__utf8_check(s, len) != len) {
        ckpt__rd_fail_at(r, start);
        return NULL;
    }
    char *copy = ckpt__arena_strndup(arena, (const char *)s, len);
    if (!copy) *oom = true;
    return copy;
}

#endif
