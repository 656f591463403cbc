/* npz.c — NumPy .npz archives (np.savez, np.savez_compressed): a ZIP of
 * "<key>.npy" members, each a .npy file (see numpy.h).  Stored members are
 * read in place; DEFLATE members through their record, like re-zipped
 * torch files.  Members whose name does not end in ".npy" are not arrays
 * (np.load gives their bytes) and are left out of the catalog. */
#include <stdlib.h>
#include <string.h>

#include "format.h"
#include "numpy.h"
#include "zip.h"

static bool ends_with(const char *s, size_t n, const char *suffix) {
    size_t k = strlen(suffix);
    return n >= k && !memcmp(s + n - k, suffix, k);
}

/* An .npz: a ZIP whose first member is a .npy, or an archive named .npz. */
static int npz_probe(const unsigned char *head, size_t n, const char *name) {
    if (!ckpt__zip_sniff(head, n)) return CKPT__PROBE_NO;
    if (name && ends_with(name, strlen(name), ".npz")) return CKPT__PROBE_MAGIC;
    if (n < 30 || memcmp(head, "PK\3\4", 4)) return CKPT__PROBE_NO;
    size_t len = (size_t)head[26] | (size_t)head[27] << 8;
    if (30 + len > n) return CKPT__PROBE_NO;
    return ends_with((const char *)head + 30, len, ".npy") ? CKPT__PROBE_MAGIC : CKPT__PROBE_NO;
}

static ckpt_status add_member(ckpt_catalog *c, ckpt__source *src, uint32_t file, const ckpt__zip_entry *e,
                              ckpt_error *err) {
    ckpt__arena *arena = ckpt__cat_arena(c);
    const char *path = src->name;
    size_t len = strlen(e->name);
    char *name = ckpt__arena_strndup(arena, e->name, len - 4);
    if (!name) return ckpt__oom(err, path, e->name);
    int64_t base = e->method == 0 ? (int64_t)e->data_offset : -1;
    if (e->method == 8 && e->comp_size == 0)
        return ckpt__fail(err, CKPT_E_ZIP_INVALID, path, name, (int64_t)e->header_offset,
                          "compressed member %s has no compressed data", e->name);
    unsigned char head[12] = {0};
    size_t n = e->size < sizeof head ? (size_t)e->size : sizeof head;
    ckpt_status st = ckpt__zip_read_prefix(src, e, n, head, err);
    if (st) return ckpt__error_in_tensor(err, st, name);
    uint64_t data_offset;
    if ((st = ckpt__npy_preamble(head, n, path, name, base, &data_offset, err))) return st;
    if (data_offset > e->size)
        return ckpt__fail(err, CKPT_E_TRUNCATED, path, name, base >= 0 ? base + (int64_t)e->size : -1,
                          "member %s ends inside its %llu-byte .npy header", e->name, (unsigned long long)data_offset);
    unsigned char *buf = ckpt__malloc((size_t)data_offset);
    if (!buf) return ckpt__oom(err, path, name);
    ckpt__npy_header h;
    st = ckpt__zip_read_prefix(src, e, data_offset, buf, err);
    if (st) st = ckpt__error_in_tensor(err, st, name);
    else st = ckpt__npy_parse(buf, (size_t)data_offset, path, name, base, arena, &h, err);
    free(buf);
    if (st) return st;
    if (h.nbytes > e->size - h.data_offset)
        return ckpt__fail(err, CKPT_E_TRUNCATED, path, name, base >= 0 ? base + (int64_t)h.data_offset : -1,
                          "member %s holds %llu bytes of data after its header; the array needs %llu", e->name,
                          (unsigned long long)(e->size - h.data_offset), (unsigned long long)h.nbytes);
    ckpt__piece piece = {.file = file, .offset = e->data_offset + h.data_offset, .big_endian = h.big_endian};
    if (e->method == 8) {
        piece.offset = h.data_offset; /* in the inflated member */
        piece.record = e->data_offset;
        piece.record_size = e->comp_size;
    }
    int64_t strides[CKPT_MAX_DIMS];
    if (h.fortran && ckpt__npy_fortran_strides(h.ndim, h.shape, strides)) {
        int64_t *s = ckpt__arena_alloc(arena, h.ndim * sizeof *s);
        if (!s) return ckpt__oom(err, path, name);
        memcpy(s, strides, h.ndim * sizeof *s);
        piece.strides = s;
    }
    ckpt__tensor_decl d = {name, h.dtype, h.ndim, h.shape, CKPT__OWN_STORAGE, &piece, 1};
    return ckpt__cat_add_tensor(c, &d, err);
}

static ckpt_status npz_open(ckpt_catalog *c, ckpt__source *src, ckpt_error *err) {
    uint32_t file;
    ckpt_status st = ckpt__cat_add_source(c, src, &file, err);
    if (st) return st;
    ckpt__zip zip;
    if ((st = ckpt__zip_open(src, false, ckpt__cat_arena(c), &zip, err))) return st;
    for (size_t i = 0; st == CKPT_OK && i < zip.count; i++) {
        const ckpt__zip_entry *e = &zip.entries[i];
        size_t len = strlen(e->name);
        if (len <= 4 || !ends_with(e->name, len, ".npy")) continue; /* not an array: np.load gives bytes */
        st = add_member(c, src, file, e, err);
    }
    ckpt__zip_close(&zip);
    ckpt__cat_set_format(c, CKPT_FORMAT_NPZ);
    return st;
}

const ckpt__format ckpt__format_npz = {"npz", npz_probe, npz_open};
