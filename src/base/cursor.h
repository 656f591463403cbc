/*
 * cursor.h — the one reader of encoded bytes: loads of little- and
 * big-endian integers from bytes known to be there, a bounded cursor over
 * a buffer that never reads past its end; and their writing twins.
 *
 * The cursor's error is sticky: a read past the end, or of a value its
 * caller finds invalid (ckpt__rd_fail), sets `bad`, records where that
 * read started, and every read after it yields zeros — so a decoder reads
 * a whole record and checks once.  `base` is the offset of the buffer's
 * first byte in its file, for cursors over a window of a file, so that
 * ckpt__rd_error_at names the failing byte of the file.
 * Depends on base only.
 */
#ifndef CKPT_BASE_CURSOR_H
#define CKPT_BASE_CURSOR_H

#include <string.h>

#include "base.h"

/* ---- loads and stores of bytes known to be there ------------------------------ */

/* The unsigned integer of `width` (≤ 8) bytes at p, little- or big-endian. */
static inline uint64_t ckpt__load_le(const unsigned char *p, unsigned width) {
    uint64_t v = 0;
    for (unsigned i = width; i-- > 0;) v = v << 8 | p[i];
    return v;
}

static inline uint64_t ckpt__load_be(const unsigned char *p, unsigned width) {
    uint64_t v = 0;
    for (unsigned i = 0; i < width; i++) v = v << 8 | p[i];
    return v;
}

static inline uint16_t ckpt__le16(const unsigned char *p) { return (uint16_t)ckpt__load_le(p, 2); }
static inline uint32_t ckpt__le32(const unsigned char *p) { return (uint32_t)ckpt__load_le(p, 4); }
static inline uint64_t ckpt__le64(const unsigned char *p) { return ckpt__load_le(p, 8); }

/* The low `width` bytes of v at p, little-endian. */
static inline void ckpt__store_le(unsigned char *p, uint64_t v, unsigned width) {
    for (unsigned i = 0; i < width; i++) p[i] = (unsigned char)(v >> (8 * i));
}

/* ---- writing ------------------------------------------------------------------ */

/* The low `width` bytes of v onto b, little-endian (up to 16: past the
 * 8th, zeros). */
static inline void ckpt__put_le(ckpt__buf *b, uint64_t v, unsigned width) {
    unsigned char x[16] = {0};
    ckpt__store_le(x, v, width < 8 ? width : 8);
    ckpt__buf_append(b, (const char *)x, width < 16 ? width : 16);
}

/* The low `width` (≤ 8) bytes of v onto b, big-endian. */
static inline void ckpt__put_be(ckpt__buf *b, uint64_t v, unsigned width) {
    unsigned char x[8];
    for (unsigned i = 0; i < width; i++) x[i] = (unsigned char)(v >> (8 * (width - 1 - i)));
    ckpt__buf_append(b, (const char *)x, width);
}

/* A record's fields, written in a row: CKPT__PUT_FIELDS(b, {4, sig}, {2, n}). */
typedef struct ckpt__field {
    unsigned width;
    uint64_t value;
} ckpt__field;

static inline void ckpt__put_fields(ckpt__buf *b, const ckpt__field *f, size_t n) {
    for (size_t i = 0; i < n; i++) ckpt__put_le(b, f[i].value, f[i].width);
}

#define CKPT__PUT_FIELDS(b, ...)                                                                                   \
    ckpt__put_fields((b), (const ckpt__field[]){__VA_ARGS__},                                                      \
                     sizeof((const ckpt__field[]){__VA_ARGS__}) / sizeof(ckpt__field))

/* ---- the bounded cursor ---------------------------------------------------------- */

typedef struct ckpt__rd {
    const unsigned char *p;
    size_t n, at;
    bool bad;      /* a read ran past the end, or read an invalid value */
    size_t bad_at; /* where the first failing read started (in p) */
    uint64_t base; /* the offset of p[0] in its file */
} ckpt__rd;

/* A cursor over n bytes at p, which start at byte `base` of their file. */
static inline ckpt__rd ckpt__rd_over(const void *p, size_t n, uint64_t base) {
    return (ckpt__rd){.p = p, .n = n, .base = base};
}

/* Marks the cursor bad at the read that started at `start` (the first
 * failure is the one kept); returns false, for `return ckpt__rd_fail_at(…)`. */
static inline bool ckpt__rd_fail_at(ckpt__rd *r, size_t start) {
    if (!r->bad) r->bad = true, r->bad_at = start;
    return false;
}

/* Marks the value just read invalid (the cursor is bad from here). */
static inline bool ckpt__rd_fail(ckpt__rd *r) { return ckpt__rd_fail_at(r, r->at); }

static inline size_t ckpt__rd_left(const ckpt__rd *r) { return r->n - r->at; }

/* The file offset of the next read; and of the first failing one (of the
 * next read while none failed), for messages. */
static inline uint64_t ckpt__rd_offset(const ckpt__rd *r) { return r->base + r->at; }
static inline uint64_t ckpt__rd_error_at(const ckpt__rd *r) { return r->base + (r->bad ? r->bad_at : r->at); }

/* Whether k more bytes are there (and the cursor good); marks it bad if not. */
static inline bool ckpt__rd_has(ckpt__rd *r, size_t k) {
    return !r->bad && (r->n - r->at >= k || ckpt__rd_fail(r));
}

/* The next k bytes in place, NULL when they are not all there. */
static inline const unsigned char *ckpt__rd_bytes(ckpt__rd *r, size_t k) {
    if (!ckpt__rd_has(r, k)) return NULL;
    const unsigned char *s = r->p + r->at;
    r->at += k;
    return s;
}

static inline bool ckpt__rd_skip(ckpt__rd *r, size_t k) { return ckpt__rd_bytes(r, k) != NULL; }

/* Whether the next bytes are `s` (a magic, a marker): they are skipped;
 * other bytes mark the cursor bad where they start. */
static inline bool ckpt__rd_expect(ckpt__rd *r, const void *s, size_t k) {
    size_t start = r->at;
    const unsigned char *b = ckpt__rd_bytes(r, k);
    return b && (memcmp(b, s, k) == 0 || ckpt__rd_fail_at(r, start));
}

/* An unsigned integer of `width` (≤ 8) bytes; 0 past the end. */
static inline uint64_t ckpt__rd_le(ckpt__rd *r, unsigned width) {
    const unsigned char *b = ckpt__rd_bytes(r, width);
    return b ? ckpt__load_le(b, width) : 0;
}

static inline uint64_t ckpt__rd_be(ckpt__rd *r, unsigned width) {
    const unsigned char *b = ckpt__rd_bytes(r, width);
    return b ? ckpt__load_be(b, width) : 0;
}

static inline uint8_t ckpt__rd_u8(ckpt__rd *r) { return (uint8_t)ckpt__rd_le(r, 1); }
static inline uint16_t ckpt__rd_u16(ckpt__rd *r) { return (uint16_t)ckpt__rd_le(r, 2); }
static inline uint32_t ckpt__rd_u32(ckpt__rd *r) { return (uint32_t)ckpt__rd_le(r, 4); }
static inline uint64_t ckpt__rd_u64(ckpt__rd *r) { return ckpt__rd_le(r, 8); }
static inline uint64_t ckpt__rd_u64be(ckpt__rd *r) { return ckpt__rd_be(r, 8); }

/* An unsigned LEB128 varint (protobuf's): at most 10 bytes, and a value
 * past 64 bits is invalid (the cursor goes bad where it starts). */
static inline uint64_t ckpt__rd_uvarint(ckpt__rd *r) {
    size_t start = r->at;
    uint64_t v = 0;
    for (unsigned shift = 0; !r->bad && r->at < r->n && shift < 70; shift += 7) {
        uint64_t low = r->p[r->at] & 0x7Fu;
        bool more = r->p[r->at++] & 0x80;
        if (shift == 63 && low > 1) break; /* bits past the 64th */
        v |= low << shift;
        if (!more) return v;
    }
    ckpt__rd_fail_at(r, start); /* cut short, too long, or too large */
    return 0;
}

/* A length of `width` bytes, then that many bytes (in place; *len gets
 * the length): NULL, and the cursor bad where the length starts, when
 * they are not all there. */
static inline const unsigned char *ckpt__rd_counted(ckpt__rd *r, unsigned width, bool big_endian, size_t *len) {
    size_t start = r->at;
    uint64_t k = big_endian ? ckpt__rd_be(r, width) : ckpt__rd_le(r, width);
    if (!r->bad && k > ckpt__rd_left(r)) ckpt__rd_fail_at(r, start);
    *len = r->bad ? 0 : (size_t)k;
    return r->bad ? NULL : ckpt__rd_bytes(r, *len);
}

/* A u32 count of items of at least `min_item` bytes each: a count the
 * bytes left cannot hold marks the cursor bad (and gives 0), so that no
 * decoder allocates for a count its input cannot back. */
static inline uint32_t ckpt__rd_count(ckpt__rd *r, size_t min_item) {
    size_t start = r->at;
    uint32_t k = ckpt__rd_u32(r);
    if (r->bad) return 0;
    if (min_item && k > ckpt__rd_left(r) / min_item) return ckpt__rd_fail_at(r, start), 0;
    return k;
}

#endif
