/*
 * wire.h — little-endian encodings for bytes that processes send each other
 * (collective operations): a growable writer over ckpt__buf, and a reader
 * that never reads past its end — every read of a truncated or lying
 * message sets `bad` and yields zeros, so a decoder checks once per record.
 * Depends on base only.
 */
#ifndef CKPT_BASE_WIRE_H
#define CKPT_BASE_WIRE_H

#include <string.h>

#include "base.h"

/* ---- writing ------------------------------------------------------------------ */

static inline void ckpt__put_u32(ckpt__buf *b, uint32_t v) {
    unsigned char x[4];
    for (int i = 0; i < 4; i++) x[i] = (unsigned char)(v >> (8 * i));
    ckpt__buf_append(b, (const char *)x, 4);
}

static inline void ckpt__put_u64(ckpt__buf *b, uint64_t v) {
    unsigned char x[8];
    for (int i = 0; i < 8; i++) x[i] = (unsigned char)(v >> (8 * i));
    ckpt__buf_append(b, (const char *)x, 8);
}

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

typedef struct ckpt__rd {
    const unsigned char *p;
    size_t n, at;
    bool bad; /* a read ran past the end, or a string was invalid */
} ckpt__rd;

static inline bool ckpt__rd_has(ckpt__rd *r, size_t k) {
    if (r->bad || r->n - r->at < k) {
        r->bad = true;
        return false;
    }
    return true;
}

static inline uint32_t ckpt__get_u32(ckpt__rd *r) {
    if (!ckpt__rd_has(r, 4)) return 0;
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) v |= (uint32_t)r->p[r->at + i] << (8 * i);
    r->at += 4;
    return v;
}

static inline uint64_t ckpt__get_u64(ckpt__rd *r) {
    if (!ckpt__rd_has(r, 8)) return 0;
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v |= (uint64_t)r->p[r->at + i] << (8 * i);
    r->at += 8;
    return v;
}

static inline uint8_t ckpt__get_u8(ckpt__rd *r) {
    if (!ckpt__rd_has(r, 1)) return 0;
    return r->p[r->at++];
}

/* A count of items of at least `min_item` bytes each: more than the bytes
 * left could hold marks the message bad (and gives 0), so that no decoder
 * allocates for a count the message cannot back. */
static inline uint32_t ckpt__get_count(ckpt__rd *r, size_t min_item) {
    uint32_t k = ckpt__get_u32(r);
    if (r->bad) return 0;
    if (min_item && k > (r->n - r->at) / min_item) {
        r->bad = true;
        return 0;
    }
    return k;
}

/*
 * A string copied into `arena` (NUL-terminated): it must be valid UTF-8
 * without NUL bytes.  *null receives whether it was NULL (allowed only when
 * `null` is given).  Returns NULL with r->bad set on a bad string, or NULL
 * with r->bad clear when out of memory (*oom set).
 */
static inline char *ckpt__get_str(ckpt__rd *r, ckpt__arena *arena, bool *null, bool *oom) {
    uint32_t len = ckpt__get_u32(r);
    if (r->bad) return NULL;
    if (len == UINT32_MAX) {
        if (!null) r->bad = true;
        else *null = true;
        return NULL;
    }
    if (null) *null = false;
    if (!ckpt__rd_has(r, len)) return NULL;
    const unsigned char *s = r->p + r->at;
    if (memchr(s, 0, len) || ckpt__utf8_check(s, len) != len) {
        r->bad = true;
        return NULL;
    }
    char *copy = ckpt__arena_strndup(arena, (const char *)s, len);
    if (!copy) *oom = true;
    r->at += len;
    return copy;
}

#endif
