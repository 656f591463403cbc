/* wire.c — what ranks send each other, as bytes (collective_internal.h):
 * a catalog (so that headers are parsed once, by rank 0) and a shard
 * writer's declarations.  The receiving side trusts nothing: every count is
 * backed by the bytes that follow it, every string is UTF-8 without NUL,
 * every piece lies inside its file and its tensor, every product is
 * overflow-checked (fuzz_wire replays hostile inputs).
 *
 * Catalog, version 1 (little-endian; str = u32 length + bytes, 0xFFFFFFFF
 * for none):
 *   "CKPTCAT1" u32 version u32 format str index_path str tree
 *   u32 files      { str name u64 size u32 entries { str key str value } }
 *   u32 metadata   { str key str value }          the checkpoint's map, in order
 *   u32 storages   { u32 file u64 base u64 nbytes }
 *   u32 tensors    { str name u32 dtype u32 ndim u64 shape[ndim] u32 storage
 *                    u32 pieces { u32 file u64 offset u8 flags
 *                                 [u64 start[ndim]] [u64 count[ndim]] [i64 strides[ndim]]
 *                                 u64 record u64 record_size } }
 *   "END!"
 */
#include <stdlib.h>
#include <string.h>

#include "base/wire.h"
#include "catalog_internal.h"
#include "collective_internal.h"
#include "formats/format.h"
#include "io/http.h"

#define CAT_MAGIC "CKPTCAT1"
#define PARTS_MAGIC "CKPTPRT1"
#define WIRE_VERSION 1u

enum { P_START = 1, P_COUNT = 2, P_STRIDES = 4, P_BIG_ENDIAN = 8, P_KNOWN = 15 };

/* ---- encoding ----------------------------------------------------------------- */

static void put_pairs(ckpt__buf *b, const ckpt__pairs *p) {
    ckpt__put_u32(b, (uint32_t)p->count);
    for (size_t i = 0; i < p->count; i++) ckpt__put_str(b, p->keys[i]), ckpt__put_str(b, ckpt__pairs_text(p, i));
}

ckpt_status ckpt__catalog_encode(const ckpt_catalog *c, ckpt__buf *b, ckpt_error *err) {
    ckpt__buf_append(b, CAT_MAGIC, 8);
    CKPT__PUT_FIELDS(b, {4, WIRE_VERSION}, {4, (uint32_t)ckpt_catalog_format(c)});
    ckpt__put_str(b, ckpt_catalog_index_path(c));
    ckpt__put_str(b, ckpt_catalog_tree_json(c));
    size_t files = ckpt_catalog_file_count(c);
    ckpt__put_u32(b, (uint32_t)files);
    for (size_t f = 0; f < files; f++) {
        ckpt__put_str(b, ckpt_catalog_file_path(c, f));
        ckpt__put_u64(b, ckpt_catalog_file_size(c, f));
        put_pairs(b, ckpt__cat_file_metadata(c, f));
    }
    size_t meta = ckpt_catalog_metadata_count(c);
    ckpt__put_u32(b, (uint32_t)meta);
    for (size_t i = 0; i < meta; i++) {
        const char *k, *v;
        ckpt_catalog_metadata_entry(c, i, &k, &v);
        ckpt__put_str(b, k), ckpt__put_str(b, v);
    }
    size_t storages = ckpt__catalog_storage_count(c);
    ckpt__put_u32(b, (uint32_t)storages);
    for (size_t i = 0; i < storages; i++) {
        uint32_t file;
        uint64_t base, nbytes;
        ckpt__catalog_storage_at(c, i, &file, &base, &nbytes);
        ckpt__put_u32(b, file), ckpt__put_u64(b, base), ckpt__put_u64(b, nbytes);
    }
    size_t tensors = ckpt_catalog_tensor_count(c);
    ckpt__put_u32(b, (uint32_t)tensors);
    for (size_t i = 0; i < tensors; i++) {
        const ckpt_tensor_info *t = ckpt_catalog_tensor(c, i);
        ckpt__put_str(b, t->name);
        CKPT__PUT_FIELDS(b, {4, (uint32_t)t->dtype}, {4, t->ndim});
        for (uint32_t d = 0; d < t->ndim; d++) ckpt__put_u64(b, t->shape[d]);
        ckpt__put_u32(b, t->storage);
        uint32_t np;
        const ckpt__piece *pieces = ckpt__catalog_pieces(c, i, &np);
        ckpt__put_u32(b, np);
        for (uint32_t k = 0; k < np; k++) {
            const ckpt__piece *p = &pieces[k];
            CKPT__PUT_FIELDS(b, {4, p->file}, {8, p->offset});
            unsigned char flags = (unsigned char)((p->start ? P_START : 0) | (p->count ? P_COUNT : 0) |
                                                  (p->strides ? P_STRIDES : 0) | (p->big_endian ? P_BIG_ENDIAN : 0));
            ckpt__buf_append(b, (const char *)&flags, 1);
            for (uint32_t d = 0; p->start && d < t->ndim; d++) ckpt__put_u64(b, p->start[d]);
            for (uint32_t d = 0; p->count && d < t->ndim; d++) ckpt__put_u64(b, p->count[d]);
            for (uint32_t d = 0; p->strides && d < t->ndim; d++) ckpt__put_u64(b, (uint64_t)p->strides[d]);
            CKPT__PUT_FIELDS(b, {8, p->record}, {8, p->record_size});
        }
    }
    ckpt__buf_append(b, "END!", 4);
    if (b->failed || files > UINT32_MAX || tensors > UINT32_MAX || storages > UINT32_MAX)
        return ckpt__oom(err, NULL, "the catalog's encoding");
    return CKPT_OK;
}

/* ---- decoding ----------------------------------------------------------------- */

typedef struct decoder {
    ckpt__rd r;
    ckpt_catalog *c;
    ckpt__arena *arena;
    bool oom;
    uint64_t *file_sizes;
    size_t files;
    /* This rank's own name of a remote file (its query kept), and that name
     * as rank 0 sent it, redacted: the file is opened by the former. */
    const char *own_file, *own_shown;
} decoder;

static ckpt_status bad(decoder *d, const char *tensor, const char *what, ckpt_error *err) {
    if (d->oom) return ckpt__oom(err, NULL, "a catalog from rank 0");
    return ckpt__fail(err, CKPT__D(COMM_DATA), NULL, tensor, (int64_t)ckpt__rd_error_at(&d->r),
                      "the catalog received from rank 0 is malformed (%s, at byte %llu of %zu)", what,
                      (unsigned long long)ckpt__rd_error_at(&d->r), d->r.n);
}

static char *str(decoder *d, bool *null) { return ckpt__rd_str(&d->r, d->arena, null, &d->oom); }

/* Whether a piece lies inside its file and its tensor; *volume receives
 * its element count. */
static bool piece_ok(const decoder *d, const ckpt__tensor_decl *t, const ckpt__piece *p, uint64_t *volume) {
    unsigned bits = ckpt_dtype_bits(t->dtype);
    if (p->file >= d->files) return false;
    uint64_t fsize = d->file_sizes[p->file], numel = 1, last = 0, x;
    for (uint32_t a = 0; a < t->ndim; a++) {
        uint64_t s = p->start ? p->start[a] : 0, k = p->count ? p->count[a] : t->shape[a];
        if (!ckpt__add_u64(s, k, &x) || x > t->shape[a]) return false;
        if (!ckpt__mul_u64(numel, k, &numel)) return false;
        if (p->strides) {
            if (p->strides[a] < 0) return false;
            if (k && (!ckpt__mul_u64(k - 1, (uint64_t)p->strides[a], &x) || !ckpt__add_u64(last, x, &last))) return false;
        }
    }
    *volume = numel;
    if (bits % 8) { /* packed sub-byte data moves whole, as bytes */
        if (t->piece_count != 1 || p->strides) return false;
        for (uint32_t a = 0; a < t->ndim; a++)
            if ((p->start && p->start[a]) || (p->count && p->count[a] != t->shape[a])) return false;
    }
    uint64_t bytes = 0, end;
    if (numel && bits % 8) {
        if (ckpt__dtype_nbytes(t->dtype, numel, &bytes) != CKPT_OK) return false;
    } else if (numel) {
        uint64_t elems = numel;
        if (p->strides && !ckpt__add_u64(last, 1, &elems)) return false;
        if (!ckpt__mul_u64(elems, bits / 8, &bytes)) return false;
    }
    if (!ckpt__add_u64(p->offset, bytes, &end)) return false;
    if (p->record_size) {
        /* Inside a DEFLATE record: the inflated bytes are at most 1032 per
         * compressed byte (DEFLATE's limit), and a read past what the record
         * holds fails then; the record itself lies in the file. */
        uint64_t most;
        if (!ckpt__mul_u64(p->record_size, 1032, &most) || end > most + 1024) return false;
        return ckpt__add_u64(p->record, p->record_size, &x) && x <= fsize;
    }
    return end <= fsize;
}

static uint64_t *u64s(decoder *d, uint32_t n) {
    uint64_t *v = ckpt__arena_alloc(d->arena, (n ? n : 1) * sizeof *v);
    if (!v) {
        d->oom = true;
        return NULL;
    }
    for (uint32_t i = 0; i < n; i++) v[i] = ckpt__rd_u64(&d->r);
    return v;
}

static ckpt_status decode_tensors(decoder *d, size_t storages, ckpt_error *err) {
    uint32_t count = ckpt__rd_count(&d->r, 4 + 4 + 4 + 4 + 4);
    if (d->r.bad) return bad(d, NULL, "tensor count", err);
    ckpt__piece *pieces = NULL;
    size_t pieces_cap = 0;
    ckpt_status st = CKPT_OK;
    for (uint32_t i = 0; st == CKPT_OK && i < count; i++) {
        ckpt__tensor_decl t;
        memset(&t, 0, sizeof t);
        t.name = str(d, NULL);
        t.dtype = (ckpt_dtype)ckpt__rd_u32(&d->r);
        t.ndim = ckpt__rd_u32(&d->r);
        if (d->r.bad || !t.name) {
            st = bad(d, NULL, "tensor name", err);
            break;
        }
        if (!ckpt_dtype_name(t.dtype) || t.ndim > CKPT_MAX_DIMS || !ckpt__rd_has(&d->r, (size_t)t.ndim * 8)) {
            st = bad(d, t.name, "tensor dtype or shape", err);
            break;
        }
        t.shape = u64s(d, t.ndim);
        t.storage = ckpt__rd_u32(&d->r);
        t.piece_count = ckpt__rd_count(&d->r, 4 + 8 + 1 + 16);
        if (d->r.bad || !t.shape || t.storage >= storages || !t.piece_count) {
            st = bad(d, t.name, "tensor storage or pieces", err);
            break;
        }
        if (t.piece_count > pieces_cap) {
            ckpt__piece *p = ckpt__realloc(pieces, t.piece_count * sizeof *p);
            if (!p) {
                st = ckpt__oom(err, NULL, "a catalog from rank 0");
                break;
            }
            pieces = p, pieces_cap = t.piece_count;
        }
        uint64_t total = 0, numel = 1, volume;
        for (uint32_t a = 0; a < t.ndim; a++)
            if (!ckpt__mul_u64(numel, t.shape[a], &numel)) numel = UINT64_MAX; /* add_tensor refuses it below */
        for (uint32_t k = 0; st == CKPT_OK && k < t.piece_count; k++) {
            ckpt__piece *p = &pieces[k];
            memset(p, 0, sizeof *p);
            p->file = ckpt__rd_u32(&d->r);
            p->offset = ckpt__rd_u64(&d->r);
            uint8_t flags = ckpt__rd_u8(&d->r);
            if (flags & ~P_KNOWN) ckpt__rd_fail(&d->r);
            if (d->r.bad) break;
            if (flags & P_START) p->start = u64s(d, t.ndim);
            if (flags & P_COUNT) p->count = u64s(d, t.ndim);
            if (flags & P_STRIDES) p->strides = (const int64_t *)u64s(d, t.ndim);
            p->big_endian = (flags & P_BIG_ENDIAN) != 0;
            p->record = ckpt__rd_u64(&d->r);
            p->record_size = ckpt__rd_u64(&d->r);
            if (d->r.bad || d->oom) break;
            if (!piece_ok(d, &t, p, &volume) || !ckpt__add_u64(total, volume, &total)) {
                st = ckpt__fail(err, CKPT__D(COMM_DATA), d->file_sizes && p->file < d->files ? ckpt_catalog_file_path(d->c, p->file) : NULL,
                                t.name, (int64_t)p->offset,
                                "the catalog received from rank 0 puts piece %u of the tensor outside its file or its shape",
                                k);
            }
        }
        if (st) break;
        if (d->r.bad || d->oom) {
            st = bad(d, t.name, "tensor pieces", err);
            break;
        }
        if (total != numel) {
            st = ckpt__fail(err, CKPT__D(COMM_DATA), NULL, t.name, -1,
                            "the catalog received from rank 0 gives the tensor pieces of %llu elements for %llu",
                            (unsigned long long)total, (unsigned long long)numel);
            break;
        }
        t.pieces = pieces;
        st = ckpt__cat_add_tensor(d->c, &t, err);
    }
    free(pieces);
    return st;
}

static ckpt_status open_by_path(void *user, const char *name, uint64_t size, ckpt__source **out, ckpt_error *err) {
    ckpt_catalog *c = user;
    ckpt_status st = ckpt__cat_open_source(c, name, out, err);
    if (st) return st;
    if ((*out)->size != size) {
        st = ckpt__fail(err, CKPT__D(COMM_DATA), name, NULL, -1,
                        "rank 0 saw %llu bytes in this file and this rank %llu: the ranks do not see the same files",
                        (unsigned long long)size, (unsigned long long)(*out)->size);
        ckpt__source_close(*out);
        *out = NULL;
    }
    return st;
}

static ckpt_status decode(decoder *d, ckpt__wire_opener opener, void *opener_user, ckpt_error *err) {
    ckpt__rd *r = &d->r;
    if (!ckpt__rd_expect(r, CAT_MAGIC, 8)) return bad(d, NULL, "not a catalog", err);
    uint32_t version = ckpt__rd_u32(r);
    if (!r->bad && version != WIRE_VERSION)
        return ckpt__fail(err, CKPT__D(COMM_DATA), NULL, NULL, -1,
                          "rank 0 sent a catalog of encoding version %u; this rank reads version %u (mixed ckpt versions)",
                          version, WIRE_VERSION);
    uint32_t format = ckpt__rd_u32(r);
    bool null;
    const char *index = str(d, &null);
    if (r->bad || d->oom) return bad(d, NULL, "header", err);
    ckpt_status st = CKPT_OK;
    if (!null && (st = ckpt__cat_set_index_path(d->c, index, err))) return st;
    const char *tree = str(d, &null);
    if (r->bad || d->oom) return bad(d, NULL, "object tree", err);
    if (!null && (st = ckpt__cat_add_tree(d->c, tree, err))) return st;
    ckpt__cat_set_format(d->c, (ckpt_format)format);
    d->files = ckpt__rd_count(r, 4 + 8 + 4);
    if (r->bad) return bad(d, NULL, "file count", err);
    if (!(d->file_sizes = ckpt__calloc(d->files ? d->files : 1, sizeof *d->file_sizes)))
        return ckpt__oom(err, NULL, "a catalog from rank 0");
    /* The checkpoint's metadata map comes after the files' maps, but its
     * order must win: the files' entries are kept aside until then. */
    size_t pending_n = 0, pending_cap = 0;
    struct pending { uint32_t file; const char *k, *v; } *pending = NULL;
    for (size_t f = 0; st == CKPT_OK && f < d->files; f++) {
        const char *name = str(d, NULL);
        uint64_t size = ckpt__rd_u64(r);
        uint32_t entries = ckpt__rd_count(r, 8);
        if (r->bad || !name) {
            st = bad(d, NULL, "file", err);
            break;
        }
        ckpt__source *src;
        /* a remote file named with credentials in its query reaches this
         * rank redacted: opened by the name this rank was given */
        if (d->own_shown && !strcmp(name, d->own_shown)) name = d->own_file;
        if ((st = opener(opener_user, name, size, &src, err))) break;
        uint32_t number;
        if ((st = ckpt__cat_add_source(d->c, src, &number, err))) break;
        d->file_sizes[f] = src->size;
        for (uint32_t e = 0; st == CKPT_OK && e < entries; e++) {
            const char *k = str(d, NULL), *v = str(d, NULL);
            if (r->bad || !k || !v) {
                st = bad(d, NULL, "file metadata", err);
                break;
            }
            struct pending *p = ckpt__grow(pending, pending_n, &pending_cap, sizeof *p, 16);
            if (!p) {
                st = ckpt__oom(err, NULL, "a catalog from rank 0");
                break;
            }
            pending = p;
            pending[pending_n++] = (struct pending){(uint32_t)f, k, v};
        }
    }
    uint32_t meta = st == CKPT_OK ? ckpt__rd_count(r, 8) : 0;
    if (st == CKPT_OK && r->bad) st = bad(d, NULL, "metadata count", err);
    for (uint32_t i = 0; st == CKPT_OK && i < meta; i++) {
        const char *k = str(d, NULL), *v = str(d, NULL);
        if (r->bad || !k || !v) st = bad(d, NULL, "metadata", err);
        else st = ckpt__cat_add_checkpoint_metadata(d->c, k, v, err);
    }
    for (size_t i = 0; st == CKPT_OK && i < pending_n; i++)
        st = ckpt__cat_add_metadata(d->c, pending[i].file, pending[i].k, pending[i].v, err);
    free(pending);
    if (st) return st;
    uint32_t storages = ckpt__rd_count(r, 4 + 8 + 8);
    if (r->bad) return bad(d, NULL, "storage count", err);
    for (uint32_t i = 0; st == CKPT_OK && i < storages; i++) {
        uint32_t file = ckpt__rd_u32(r);
        uint64_t base = ckpt__rd_u64(r), nbytes = ckpt__rd_u64(r);
        if (r->bad || file >= d->files) return bad(d, NULL, "storage", err);
        uint32_t number;
        st = ckpt__cat_add_storage(d->c, file, base, nbytes, &number, err);
    }
    if (st == CKPT_OK) st = decode_tensors(d, storages, err);
    if (st == CKPT_OK && (!ckpt__rd_expect(r, "END!", 4) || ckpt__rd_left(r)))
        st = bad(d, NULL, "end marker", err);
    return st;
}

ckpt_status ckpt__catalog_decode(const void *data, size_t n, const char *path, const ckpt_catalog_options *options,
                                 ckpt__wire_opener opener, void *opener_user, ckpt_catalog **out, ckpt_error *err) {
    *out = NULL;
    decoder d;
    memset(&d, 0, sizeof d);
    d.r = ckpt__rd_over(data, n, 0);
    ckpt_status st = ckpt__catalog_new(options, &d.c, err);
    if (st) return st;
    /* The files rank 0 names are opened as rank 0 opened them: the path
     * this rank was given as named, every other one beneath its directory,
     * with the credentials this rank's name carries (rank 0's names carry
     * none). */
    char *clean = NULL, *as_file = NULL, *shown = NULL;
    if (path && ckpt__source_is_remote_name(path)) {
        st = ckpt__catalog_take_credentials(d.c, path, &clean, &as_file, err);
        if (st == CKPT_OK && !(shown = ckpt__url_redact(as_file))) st = ckpt__oom(err, NULL, NULL);
        d.own_file = as_file, d.own_shown = shown;
    }
    if (clean) path = clean;
    if (path && st == CKPT_OK)
        st = ckpt__catalog_set_root(d.c, path,
                                    !ckpt__source_is_remote_name(path) && ckpt__source_stat(path, NULL) == CKPT__NAME_DIR,
                                    err);
    free(clean);
    if (st) {
        free(as_file), free(shown);
        ckpt_catalog_close(d.c);
        return st;
    }
    d.arena = ckpt__cat_arena(d.c);
    st = decode(&d, opener ? opener : open_by_path, opener ? opener_user : d.c, err);
    ckpt__catalog_opened(d.c);
    if (as_file) memset(as_file, 0, strlen(as_file)); /* it held a secret */
    free(as_file), free(shown);
    free(d.file_sizes);
    if (st) {
        ckpt_catalog_close(d.c);
        return st;
    }
    *out = d.c;
    return CKPT_OK;
}

/* ---- a shard writer's declarations ------------------------------------------ */

ckpt_status ckpt__parts_encode(const ckpt__wire_part *parts, size_t count, ckpt__buf *b, ckpt_error *err) {
    ckpt__buf_append(b, PARTS_MAGIC, 8);
    CKPT__PUT_FIELDS(b, {4, WIRE_VERSION}, {4, (uint32_t)count});
    for (size_t i = 0; i < count; i++) {
        const ckpt__wire_part *p = &parts[i];
        ckpt__put_str(b, p->name);
        CKPT__PUT_FIELDS(b, {4, (uint32_t)p->dtype}, {4, p->ndim});
        for (uint32_t a = 0; a < p->ndim; a++)
            ckpt__put_u64(b, p->shape[a]), ckpt__put_u64(b, p->start[a]), ckpt__put_u64(b, p->count[a]);
    }
    if (b->failed || count > UINT32_MAX) return ckpt__oom(err, NULL, "the declarations' encoding");
    return CKPT_OK;
}

ckpt_status ckpt__parts_decode(const void *data, size_t n, int rank, ckpt__arena *arena, ckpt__wire_part **out,
                               size_t *out_count, ckpt_error *err) {
    *out = NULL, *out_count = 0;
    ckpt__rd r = ckpt__rd_over(data, n, 0);
    bool oom = false;
    if (!ckpt__rd_expect(&r, PARTS_MAGIC, 8))
        return ckpt__fail(err, CKPT__D(COMM_DATA), NULL, NULL, -1, "rank %d sent declarations that are not ckpt's", rank);
    uint32_t version = ckpt__rd_u32(&r);
    if (!r.bad && version != WIRE_VERSION)
        return ckpt__fail(err, CKPT__D(COMM_DATA), NULL, NULL, -1,
                          "rank %d sent declarations of encoding version %u; this rank reads version %u", rank, version,
                          WIRE_VERSION);
    uint32_t count = ckpt__rd_count(&r, 4 + 4 + 4);
    ckpt__wire_part *parts = r.bad ? NULL : ckpt__arena_alloc(arena, (count ? count : 1) * sizeof *parts);
    if (!r.bad && !parts) return ckpt__oom(err, NULL, "declarations");
    for (uint32_t i = 0; !r.bad && i < count; i++) {
        ckpt__wire_part *p = &parts[i];
        p->name = ckpt__rd_str(&r, arena, NULL, &oom);
        p->dtype = (ckpt_dtype)ckpt__rd_u32(&r);
        p->ndim = ckpt__rd_u32(&r);
        if (oom) return ckpt__oom(err, NULL, "declarations");
        if (r.bad || !ckpt_dtype_name(p->dtype) || p->ndim > CKPT_MAX_DIMS || !ckpt__rd_has(&r, (size_t)p->ndim * 24)) {
            ckpt__rd_fail(&r);
            break;
        }
        uint64_t *v = ckpt__arena_alloc(arena, (3 * (size_t)p->ndim + 1) * sizeof *v);
        if (!v) return ckpt__oom(err, NULL, "declarations");
        p->shape = v, p->start = v + p->ndim, p->count = v + 2 * p->ndim;
        for (uint32_t a = 0; a < p->ndim; a++) {
            v[a] = ckpt__rd_u64(&r);
            v[p->ndim + a] = ckpt__rd_u64(&r);
            v[2 * p->ndim + a] = ckpt__rd_u64(&r);
        }
    }
    if (r.bad || ckpt__rd_left(&r))
        return ckpt__fail(err, CKPT__D(COMM_DATA), NULL, NULL, (int64_t)ckpt__rd_error_at(&r),
                          "the declarations rank %d sent are malformed (at byte %llu of %zu)", rank,
                          (unsigned long long)ckpt__rd_error_at(&r), r.n);
    *out = parts, *out_count = count;
    return CKPT_OK;
}
