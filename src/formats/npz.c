/* npz.c — NumPy .npz archives (np.savez, np.savez_compressed): a ZIP of
 * "<key>.npy" members, each a .npy file (see numpy.h).  Stored members are
 * read in place; DEFLATE members through their record, like re-zipped
 * torch files.  Members whose name does not end in ".npy" are not arrays
 * (np.load gives their bytes) and are left out of the catalog; every
 * member's CRC-32 is declared (an array's with its .npy header's CRC-32 as
 * its head, so that a load reading the data checks the member, as np.load
 * does).
 *
 * Written (the output format at the bottom) as np.savez writes: stored
 * members with ZIP64 fields (force_zip64), each a .npy whose header numpy's
 * own writer would make, then the central directory and the ZIP64 end
 * records.  Everything but the CRC-32s is known before the data; the
 * writer computes each tensor's CRC-32 as it streams, and finish patches
 * each member's (its header's CRC combined with its data's) into the local
 * headers and the directory. */
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "../base/cursor.h"
#include "../io/file.h"
#include "format.h"
#include "numpy.h"
#include "output.h"
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
    size_t len = ckpt__le16(head + 26);
    if (30 + len > n) return CKPT__PROBE_NO;
    return ends_with((const char *)head + 30, len, ".npy") ? CKPT__PROBE_MAGIC : CKPT__PROBE_NO;
}

/* An array member: its tensor, and the CRC-32 it records (`crc`, NULL:
 * none), whose head is the .npy header read here. */
static ckpt_status add_member(ckpt_catalog *c, ckpt__source *src, uint32_t file, const ckpt__zip_entry *e,
                              ckpt__recorded_crc *crc, ckpt_error *err) {
    ckpt__arena *arena = ckpt__cat_arena(c);
    const char *path = src->name;
    size_t len = strlen(e->name);
    char *name = ckpt__arena_strndup(arena, e->name, len - 4);
    if (!name) return ckpt__oom(err, path, e->name);
    int64_t base = e->method == 0 ? (int64_t)e->data_offset : -1;
    if (e->method == 8 && e->comp_size == 0)
        return ckpt__fail(err, CKPT__D(ZIP_INVALID), path, name, (int64_t)e->header_offset,
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
    if (st == CKPT_OK && crc) {
        crc->head = data_offset;
        crc->head_crc32 = (uint32_t)crc32_z(crc32_z(0L, Z_NULL, 0), buf, (z_size_t)data_offset);
    }
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
    uint32_t index;
    if (crc && (st = ckpt__cat_add_crc(c, file, crc, &index, err))) return st;
    if (crc) piece.crc = index + 1;
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
        ckpt__recorded_crc crc;
        bool recorded = ckpt__zip_recorded_crc(e, &crc);
        if (len > 4 && ends_with(e->name, len, ".npy")) st = add_member(c, src, file, e, recorded ? &crc : NULL, err);
        else if (recorded) st = ckpt__cat_add_crc(c, file, &crc, NULL, err); /* not an array: np.load gives bytes */
    }
    ckpt__zip_close(&zip);
    ckpt__cat_set_format(c, CKPT_FORMAT_NPZ);
    return st;
}

const ckpt__format ckpt__format_npz = {"npz", CKPT_FORMAT_NPZ, npz_probe, npz_open};

/* ---- writing ------------------------------------------------------------------- */

enum {
    ZIP64_EXTRA_LOCAL = 20, ZIP64_EXTRA_CENTRAL = 28,
    ZIP_VERSION = 45, /* 4.5: ZIP64 */
    MADE_BY = ZIP_VERSION | 3 << 8, /* Unix */
    DOS_DATE = 0x21,  /* 1980-01-01, so that the same tensors give the same bytes */
};

typedef struct npz_member {
    size_t tensor;
    uint64_t at;           /* its local header */
    const char *name;      /* "<tensor>.npy" (arena) */
    size_t name_len;
    unsigned char *header; /* the .npy header (arena) */
    size_t header_len;
    uint64_t data_len;
} npz_member;

typedef struct npz_out {
    npz_member *members;
    size_t count;
    uint64_t directory, directory_len, end;
} npz_out;

static bool ascii(const char *s) {
    for (; *s; s++)
        if ((unsigned char)*s >= 0x80) return false;
    return true;
}

static ckpt_status npz_plan(ckpt__output *o, ckpt_error *err) {
    const ckpt_writer_options *opt = ckpt__out_options(o);
    const char *path = ckpt__out_path(o);
    if (opt->checksums)
        return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, path, NULL, -1,
                          "an .npz archive has no metadata to record checksums in (its members carry CRC-32s)");
    ckpt__arena *arena = ckpt__out_arena(o);
    npz_out *s = ckpt__arena_alloc(arena, sizeof *s);
    size_t n = ckpt__out_count(o);
    if (!s || !(s->members = ckpt__arena_alloc(arena, (n ? n : 1) * sizeof *s->members))) return ckpt__oom(err, path, NULL);
    s->count = 0;
    *ckpt__out_format_state(o) = s;
    for (size_t i = 0; i < n; i++) {
        ckpt__out_tensor *t = ckpt__out_tensor_at(o, i);
        if (t->file == CKPT__OUT_NONE) continue;
        t->file = 0;
        size_t len = strlen(t->name);
        if (len + 4 > 0xFFFF)
            return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, path, t->name, -1, "name too long for a ZIP member");
        ckpt__buf h = {0};
        ckpt_status st = ckpt__npy_header_write(&h, t->dtype, t->ndim, t->shape);
        if (st) st = ckpt__oom(err, path, t->name); /* dtypes without a NumPy name were refused as declared */
        npz_member *m = &s->members[s->count++];
        char *name = st ? NULL : ckpt__arena_alloc(arena, len + 5);
        unsigned char *hdr = st ? NULL : ckpt__arena_alloc(arena, h.len ? h.len : 1);
        if (!st && (!name || !hdr)) st = ckpt__oom(err, path, t->name);
        if (!st) {
            memcpy(name, t->name, len);
            memcpy(name + len, ".npy", 5);
            memcpy(hdr, h.data, h.len);
            *m = (npz_member){.tensor = i, .name = name, .name_len = len + 4, .header = hdr, .header_len = h.len,
                              .data_len = t->nbytes};
        }
        free(h.data);
        if (st) return st;
    }
    const char *base = ckpt__path_basename(path);
    return ckpt__out_set_files(o, 1, &base, err);
}

/* A member's local header (`central` false) or directory entry: its name
 * UTF-8 (bit 11) unless ASCII, stored, its sizes in the ZIP64 field (as
 * force_zip64 writes them), and in the directory made by Unix, 4.5,
 * -rw-------, its offset in the ZIP64 field too. */
static void member_record(ckpt__buf *b, const npz_member *m, uint32_t crc, bool central) {
    uint64_t size = m->header_len + m->data_len;
    ckpt__zip_header h = {.made_by = MADE_BY, .needed = ZIP_VERSION, .flags = ascii(m->name) ? 0 : 0x800,
                          .dos_date = DOS_DATE, .crc = crc, .size = 0xFFFFFFFFu, .external = 0600u << 16,
                          .local = 0xFFFFFFFFu, .name_len = (uint16_t)m->name_len,
                          .extra_len = central ? ZIP64_EXTRA_CENTRAL : ZIP64_EXTRA_LOCAL};
    ckpt__zip_put_header(b, &h, central);
    ckpt__buf_append(b, m->name, m->name_len);
    CKPT__PUT_FIELDS(b, {2, 1}, {2, h.extra_len - 4}, {8, size}, {8, size});
    if (central) ckpt__put_le(b, m->at, 8);
}

static ckpt_status npz_layout(ckpt__output *o, uint32_t file, ckpt__buf *head, ckpt_error *err) {
    (void)file;
    npz_out *s = *ckpt__out_format_state(o);
    uint64_t at = 0, dir_len = 0;
    for (size_t k = 0; k < s->count; k++) {
        npz_member *m = &s->members[k];
        m->at = at;
        uint64_t data = at + CKPT__ZIP_LOCAL_SIZE + m->name_len + ZIP64_EXTRA_LOCAL + m->header_len;
        ckpt__out_tensor_at(o, m->tensor)->offset = data;
        if (!ckpt__add_u64(data, m->data_len, &at))
            return ckpt__fail(err, CKPT__D(SHAPE_OVERFLOW), ckpt__out_path(o), NULL, -1, "archive size overflows");
        dir_len += CKPT__ZIP_CENTRAL_SIZE + m->name_len + ZIP64_EXTRA_CENTRAL;
    }
    s->directory = at;
    s->directory_len = dir_len;
    s->end = at + dir_len + CKPT__ZIP_ENDS_SIZE;
    if (s->count) { /* the first member's headers; the rest is written at finish */
        member_record(head, &s->members[0], 0, false);
        ckpt__buf_append(head, (const char *)s->members[0].header, s->members[0].header_len);
    }
    ckpt__out_set_file_size(o, 0, s->end);
    return head->failed ? ckpt__oom(err, ckpt__out_path(o), NULL) : CKPT_OK;
}

static ckpt_status npz_finish(ckpt__output *o, ckpt_error *err) {
    npz_out *s = *ckpt__out_format_state(o);
    ckpt__buf dir = {0}, lh = {0};
    ckpt_status st = CKPT_OK;
    for (size_t k = 0; st == CKPT_OK && k < s->count; k++) {
        const npz_member *m = &s->members[k];
        const ckpt__out_tensor *t = ckpt__out_tensor_at(o, m->tensor);
        uLong hcrc = crc32_z(crc32_z(0L, Z_NULL, 0), m->header, m->header_len);
        uint32_t crc = (uint32_t)crc32_combine64(hcrc, t->crc32, (z_off64_t)m->data_len);
        lh.len = 0;
        member_record(&lh, m, crc, false);
        st = lh.failed ? ckpt__oom(err, ckpt__out_path(o), NULL) : ckpt__out_patch(o, 0, m->at, lh.data, lh.len, err);
        if (st == CKPT_OK) st = ckpt__out_patch(o, 0, m->at + lh.len, m->header, m->header_len, err);
        member_record(&dir, m, crc, true);
    }
    free(lh.data);
    ckpt__zip_put_ends(&dir, s->count, s->directory_len, s->directory, MADE_BY, ZIP_VERSION);
    if (st == CKPT_OK && dir.failed) st = ckpt__oom(err, ckpt__out_path(o), NULL);
    if (st == CKPT_OK) st = ckpt__out_patch(o, 0, s->directory, dir.data, dir.len, err);
    free(dir.data);
    return st;
}

static const char *const npz_suffixes[] = {".npz", NULL};

const ckpt__output_format ckpt__output_npz = {
    .name = "npz",
    .id = CKPT_FORMAT_NPZ,
    .suffixes = npz_suffixes,
    .layouts = CKPT__LAYOUT_FILE,
    .plan = npz_plan,
    .layout = npz_layout,
    .finish = npz_finish,
    .owns = ckpt__out_owns_none,
    .needs = ckpt__out_needs_crc32,
    .dedup = false, /* np.savez writes every array, tied ones too */
    .accepts = ckpt__numpy_accepts,
};
