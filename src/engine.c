/* engine.c — every byte that leaves a checkpoint: ckpt_catalog_read and
 * ckpt_catalog_view. */
#include <stdlib.h>
#include <string.h>

#include "catalog_internal.h"
#include "formats/zip.h"
#include "io/file.h"

static ckpt_status check_tensor(const ckpt_catalog *c, const ckpt_tensor_info *t, size_t *index, ckpt_error *err) {
    *index = ckpt__catalog_index_of(c, t);
    if (*index == SIZE_MAX)
        return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, NULL, NULL, -1, "tensor info does not belong to this catalog");
    return CKPT_OK;
}

/* Where a tensor's bytes come from: the file directly, or a DEFLATE record. */
typedef struct source {
    ckpt__source *src;
    const ckpt__piece *p;
} source;

/* Bytes [off, off + n) of the tensor's storage run, from element 0 on. */
static ckpt_status fetch(const source *s, const ckpt_tensor_info *t, uint64_t off, void *dst, uint64_t n,
                         ckpt_error *err) {
    if (!s->p->record_size) return ckpt__source_read(s->src, dst, n, s->p->offset + off, err);
    return ckpt__zip_inflate_range(s->src, s->p->record, s->p->record_size, t->name, s->p->offset + off, dst, n, err);
}

/* Bytes per byte-swapped unit: the element, or each half of a complex. */
static unsigned swap_unit(ckpt_dtype d) {
    unsigned bytes = ckpt_dtype_bits(d) / 8;
    return d == CKPT_C64 ? 4 : bytes ? bytes : 1;
}

/* Contiguous big-endian data: read in place, swap whole units, and redo
 * the (at most two) units the range cuts. */
static ckpt_status read_swapped(const source *src, const ckpt_tensor_info *t, uint64_t off, void *dst, uint64_t n,
                                ckpt_error *err) {
    unsigned unit = swap_unit(t->dtype);
    unsigned char *out = dst;
    ckpt_status st = fetch(src, t, off, out, n, err);
    if (st || unit < 2 || n == 0) return st;
    uint64_t first = off / unit * unit, end = off + n;
    for (uint64_t u = first; u < end; u += unit) {
        if (u >= off && u + unit <= end) {
            ckpt__swap_units(out + (u - off), unit, unit);
            continue;
        }
        unsigned char tmp[8];
        if ((st = fetch(src, t, u, tmp, unit, err))) return st;
        ckpt__swap_units(tmp, unit, unit);
        for (unsigned k = 0; k < unit; k++)
            if (u + k >= off && u + k < end) out[u + k - off] = tmp[k];
    }
    return CKPT_OK;
}

/* A strided view: read the span of the storage it covers, then gather. */
static ckpt_status read_strided(const source *src, const ckpt_tensor_info *t, uint64_t off, void *dst, uint64_t n,
                                ckpt_error *err) {
    if (n == 0) return CKPT_OK;
    uint64_t item = ckpt_dtype_bits(t->dtype) / 8, span = 1;
    for (uint32_t d = 0; d < t->ndim; d++) span += (t->shape[d] - 1) * (uint64_t)t->strides[d];
    span *= item;
    if (span > (1ULL << 34))
        return ckpt__fail(err, CKPT_E_LIMIT, src->src->name, t->name, (int64_t)t->offset,
                          "strided tensor spans %llu bytes of its storage; gathering it needs that much memory",
                          (unsigned long long)span);
    unsigned char *buf = ckpt__malloc((size_t)span);
    if (!buf) return ckpt__oom(err, src->src->name, t->name);
    ckpt_status st = fetch(src, t, 0, buf, span, err);
    if (st == CKPT_OK) {
        if (t->big_endian) ckpt__swap_units(buf, (size_t)span, swap_unit(t->dtype));
        uint64_t idx[CKPT_MAX_DIMS], e = off / item, rest = e, at = 0;
        for (uint32_t d = t->ndim; d-- > 0;) {
            idx[d] = rest % t->shape[d];
            rest /= t->shape[d];
            at += idx[d] * (uint64_t)t->strides[d];
        }
        unsigned char *out = dst;
        uint64_t skip = off % item, left = n;
        while (left) {
            uint64_t take = item - skip < left ? item - skip : left;
            memcpy(out, buf + at * item + skip, (size_t)take);
            out += take;
            left -= take;
            skip = 0;
            for (uint32_t d = t->ndim; d-- > 0;) {
                at += (uint64_t)t->strides[d];
                if (++idx[d] < t->shape[d]) break;
                at -= idx[d] * (uint64_t)t->strides[d];
                idx[d] = 0;
            }
        }
    }
    free(buf);
    return st;
}

ckpt_status ckpt_catalog_read(const ckpt_catalog *c, const ckpt_tensor_info *t, uint64_t byte_offset, void *dst,
                              uint64_t nbytes, ckpt_error *err) {
    size_t index;
    ckpt_status st = check_tensor(c, t, &index, err);
    if (st) return st;
    uint64_t end;
    if (!ckpt__add_u64(byte_offset, nbytes, &end) || end > t->nbytes)
        return ckpt__fail(err, CKPT_E_OUT_OF_RANGE, ckpt_catalog_file_path(c, t->file), t->name, -1,
                          "bytes [%llu, %llu + %llu) are outside the tensor's %llu bytes",
                          (unsigned long long)byte_offset, (unsigned long long)byte_offset,
                          (unsigned long long)nbytes, (unsigned long long)t->nbytes);
    if (nbytes && !dst) return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, NULL, t->name, -1, "no destination buffer");
    uint32_t pieces;
    const ckpt__piece *p = ckpt__catalog_pieces(c, index, &pieces);
    source src = {ckpt__catalog_source(c, p->file), p};
    if (!t->strides && !t->big_endian) st = fetch(&src, t, byte_offset, dst, nbytes, err);
    else st = t->strides ? read_strided(&src, t, byte_offset, dst, nbytes, err)
                         : read_swapped(&src, t, byte_offset, dst, nbytes, err);
    return st ? ckpt__error_in_tensor(err, st, t->name) : st;
}

ckpt_status ckpt_catalog_view(ckpt_catalog *c, const ckpt_tensor_info *t, const void **data, ckpt_error *err) {
    size_t index;
    ckpt_status st = check_tensor(c, t, &index, err);
    if (st) return st;
    if (!data) return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, NULL, t->name, -1, "data is required");
    const char *path = ckpt_catalog_file_path(c, t->file);
    if (t->strides || t->big_endian || t->compressed)
        return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, path, t->name, -1,
                          "the tensor is %s in the file: no view of it as a dense little-endian array; read it instead",
                          t->strides ? "a strided view" : t->big_endian ? "big-endian" : "compressed");
    const void *base;
    if ((st = ckpt__catalog_map(c, t->file, &base, err))) return ckpt__error_in_tensor(err, st, t->name);
    static const char empty[1];
    *data = base ? (const char *)base + t->offset : empty;
    return CKPT_OK;
}
