/* inflate.c — see inflate.h. */
#include "inflate.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "crc32.h"

enum { IN_CHUNK = 1 << 20 };

struct ckpt__inflater {
    ckpt__source *src;
    uint64_t record, record_size;
    z_stream z;
    bool live;           /* z is initialised */
    bool ended;          /* the stream reached its end */
    uint64_t read_at;    /* compressed bytes fed so far */
    uint64_t position;   /* inflated bytes produced so far */
    uint64_t bytes_in;   /* compressed bytes read over the inflater's life */
    uint32_t crc;        /* CRC-32 of the position bytes produced */
    unsigned char *in;
};

ckpt_status ckpt__inflater_create(ckpt__source *src, uint64_t record, uint64_t record_size, ckpt__inflater **out,
                                  ckpt_error *err) {
    ckpt__inflater *f = ckpt__calloc(1, sizeof *f);
    unsigned char *in = f ? ckpt__malloc(IN_CHUNK) : NULL;
    if (!in) {
        free(f);
        return ckpt__oom(err, src->name, "a DEFLATE reader");
    }
    f->src = src, f->record = record, f->record_size = record_size, f->in = in;
    *out = f;
    return CKPT_OK;
}

bool ckpt__inflater_is(const ckpt__inflater *f, const ckpt__source *src, uint64_t record) {
    return f && f->src == src && f->record == record;
}

uint64_t ckpt__inflater_position(const ckpt__inflater *f) { return f->position; }
uint64_t ckpt__inflater_bytes_in(const ckpt__inflater *f) { return f->bytes_in; }

static ckpt_status restart(ckpt__inflater *f, const char *tensor, ckpt_error *err) {
    if (f->live) inflateEnd(&f->z);
    memset(&f->z, 0, sizeof f->z);
    f->live = false;
    f->ended = false;
    f->read_at = f->position = 0;
    f->crc = 0;
    if (inflateInit2(&f->z, -MAX_WBITS) != Z_OK) return ckpt__oom(err, f->src->name, "zlib");
    f->live = true;
    (void)tensor;
    return CKPT_OK;
}

/* Feeds zlib the next compressed bytes when it has none; false when the
 * record has no more (*st: CKPT_OK) or a read failed. */
static bool feed(ckpt__inflater *f, const char *tensor, ckpt_status *st, ckpt_error *err) {
    *st = CKPT_OK;
    if (f->z.avail_in) return true;
    if (f->read_at == f->record_size) return false;
    uint64_t len = f->record_size - f->read_at < IN_CHUNK ? f->record_size - f->read_at : IN_CHUNK;
    if ((*st = ckpt__source_read(f->src, f->in, len, f->record + f->read_at, err))) {
        *st = ckpt__error_in_tensor(err, *st, tensor);
        return false;
    }
    f->read_at += len;
    f->bytes_in += len;
    f->z.next_in = f->in;
    f->z.avail_in = (uInt)len;
    return true;
}

/* One inflate call into out[0, room): *made bytes (added to the CRC). */
static ckpt_status step(ckpt__inflater *f, unsigned char *out, uint64_t room, uint64_t *made, const char *tensor,
                        ckpt_error *err) {
    if (room > (1u << 30)) room = 1u << 30; /* zlib counts in uInt */
    f->z.next_out = out;
    f->z.avail_out = (uInt)room;
    int r = inflate(&f->z, Z_NO_FLUSH);
    *made = room - f->z.avail_out;
    if (r == Z_STREAM_END) f->ended = true;
    else if (r != Z_OK && r != Z_BUF_ERROR)
        return ckpt__fail(err, CKPT__D(ZIP_INVALID), f->src->name, tensor, (int64_t)f->record,
                          "DEFLATE data is damaged after %llu inflated bytes", (unsigned long long)f->position);
    f->crc = ckpt__crc32(f->crc, out, (size_t)*made);
    f->position += *made;
    return CKPT_OK;
}

/* Produces `n` more bytes into dst (or discards them when dst is NULL). */
static ckpt_status produce(ckpt__inflater *f, unsigned char *dst, uint64_t n, const char *tensor, ckpt_error *err) {
    unsigned char sink[16384];
    while (n) {
        if (f->ended)
            return ckpt__fail(err, CKPT__D(ZIP_INVALID), f->src->name, tensor, (int64_t)f->record,
                              "DEFLATE stream ends after %llu bytes, before the data it should hold",
                              (unsigned long long)f->position);
        ckpt_status st;
        if (!feed(f, tensor, &st, err))
            return st ? st : ckpt__fail(err, CKPT__D(ZIP_INVALID), f->src->name, tensor, (int64_t)f->record,
                                        "DEFLATE data ends after %llu bytes, before the data it should hold",
                                        (unsigned long long)f->position);
        uint64_t made;
        if ((st = step(f, dst ? dst : sink, dst ? n : (n < sizeof sink ? n : sizeof sink), &made, tensor, err)))
            return st;
        n -= made;
        if (dst) dst += made;
    }
    return CKPT_OK;
}

ckpt_status ckpt__inflater_read(ckpt__inflater *f, uint64_t offset, void *dst, uint64_t n, const char *tensor,
                                ckpt_error *err) {
    ckpt_status st = CKPT_OK;
    if (!f->live || offset < f->position) st = restart(f, tensor, err);
    if (st == CKPT_OK && offset > f->position) st = produce(f, NULL, offset - f->position, tensor, err);
    if (st == CKPT_OK) st = produce(f, dst, n, tensor, err);
    return st;
}

ckpt_status ckpt__inflater_check(ckpt__inflater *f, uint64_t size, uint32_t crc32, const char *member,
                                 const char *tensor, ckpt_error *err) {
    const char *path = f->src->name;
    ckpt_status st = CKPT_OK;
    if (!f->live || f->position > size) st = restart(f, tensor, err);
    if (st == CKPT_OK && size > f->position && (st = produce(f, NULL, size - f->position, tensor, err))) {
        if (!err || err->detail != CKPT_D_ZIP_INVALID) return st;
        char why[sizeof err->message];
        snprintf(why, sizeof why, "%s", err->message);
        return ckpt__fail(err, CKPT__D(ZIP_INVALID), path, tensor, (int64_t)f->record, "ZIP member '%s' declares %llu bytes: %s", member,
                          (unsigned long long)size, why);
    }
    /* The stream must end right there: one more byte is a size that lies. */
    while (st == CKPT_OK && !f->ended) {
        unsigned char extra;
        uint64_t made = 0;
        if (!feed(f, tensor, &st, err)) {
            if (st == CKPT_OK)
                st = ckpt__fail(err, CKPT__D(ZIP_INVALID), path, tensor, (int64_t)f->record,
                                "ZIP member '%s': its DEFLATE stream is cut short after the %llu bytes it declares",
                                member, (unsigned long long)size);
            break;
        }
        if ((st = step(f, &extra, 1, &made, tensor, err))) break;
        if (made)
            st = ckpt__fail(err, CKPT__D(ZIP_INVALID), path, tensor, (int64_t)f->record,
                            "ZIP member '%s' declares %llu bytes; its DEFLATE stream holds more", member,
                            (unsigned long long)size);
    }
    if (st == CKPT_OK && f->crc != crc32)
        st = ckpt__fail(err, CKPT__D(CHECKSUM), path, tensor, (int64_t)f->record,
                        "ZIP member '%s' has CRC-32 %08x; the archive records %08x: its bytes changed", member, f->crc,
                        crc32);
    return st;
}

void ckpt__inflater_free(ckpt__inflater *f) {
    if (!f) return;
    if (f->live) inflateEnd(&f->z);
    free(f->in);
    free(f);
}
