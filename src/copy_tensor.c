/* copy_tensor.c — ckpt_writer_copy_tensor and ckpt_writer_copy_range: a
 * tensor of an open checkpoint, or the next bytes of one, copied into a
 * writer by the kernel (copy_file_range: a reflink where the file system
 * shares blocks and the offsets allow), with the digests its bytes are
 * known by.  Incremental saves build on them: a tensor whose digest equals
 * the base checkpoint's is cloned, not written; a large one whose chunks
 * partly equal the base's is cloned chunk by chunk and written in between. */
#include <stdlib.h>
#include <string.h>

#include "catalog_internal.h"
#include "io/file.h"
#include "writer_internal.h"

/* The tensor's bytes as they lie in one file, contiguous and as they are
 * (no DEFLATE, no byte swap, no strides), or NULL. */
static const ckpt__piece *stored_plainly(const ckpt_catalog *cat, size_t index) {
    uint32_t count;
    const ckpt__piece *p = ckpt__catalog_pieces(cat, index, &count);
    if (count != 1 || p->start || p->count || p->strides || p->record_size || p->big_endian) return NULL;
    return p;
}

/* The source tensor, checked: stored plainly, of the writer tensor's size. */
static ckpt_status plain_source(ckpt_writer *w, const ckpt_catalog *src, size_t src_index, const ckpt__piece **p,
                                ckpt_error *err) {
    if (!w || !src || src_index >= ckpt_catalog_tensor_count(src))
        return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, NULL, NULL, -1,
                          "a writer, a catalog and one of its tensors are required");
    const ckpt_tensor_info *from = ckpt_catalog_tensor(src, src_index);
    if (!(*p = stored_plainly(src, src_index)))
        return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, ckpt_catalog_file_path(src, from->file), from->name, -1,
                          "its bytes are not stored as they are (compressed, byte-swapped or in pieces): write them");
    return CKPT_OK;
}

/* The chunk digests `src` records of its tensor, when they are the chunks
 * writer tensor `index` has (same size and phase): a copy of the whole
 * tensor records them.  *chunks (malloc'ed) stays NULL for a tensor with
 * none; CKPT_E_INVALID_ARGUMENT when the source cannot give them. */
static ckpt_status source_chunks(ckpt_writer *w, size_t index, const ckpt_catalog *src, size_t src_index,
                                 uint64_t **chunks, size_t *count, ckpt_error *err) {
    uint64_t size, phase;
    ckpt_status st = ckpt_writer_tensor_chunks(w, index, &size, &phase, count, err);
    *chunks = NULL;
    if (st || !*count) return st;
    size_t n = ckpt_catalog_tensor_count(src), total = 0;
    ckpt_chunk_record *records = ckpt__malloc((n ? n : 1) * sizeof *records);
    if (!records) return ckpt__oom(err, NULL, "the chunk digests");
    st = ckpt_catalog_recorded_chunks(src, records, NULL, 0, &total, err);
    const ckpt_chunk_record *r = &records[src_index];
    if (st == CKPT_OK && (r->chunk_bytes != size || r->phase != phase || r->count != *count))
        st = ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, ckpt_catalog_file_path(src, ckpt_catalog_tensor(src, src_index)->file),
                        ckpt_catalog_tensor(src, src_index)->name, -1,
                        "it records no chunk digests laid out as the output's (another place in the file): give the "
                        "digests (ckpt_writer_give_digests) and copy it with ckpt_writer_copy_range");
    uint64_t *all = st == CKPT_OK ? ckpt__malloc((total ? total : 1) * sizeof *all) : NULL;
    if (st == CKPT_OK && !all) st = ckpt__oom(err, NULL, "the chunk digests");
    if (st == CKPT_OK) st = ckpt_catalog_recorded_chunks(src, records, all, total, &total, err);
    if (st == CKPT_OK && (*chunks = ckpt__malloc(*count * sizeof **chunks)))
        memcpy(*chunks, all + r->first, *count * sizeof **chunks);
    else if (st == CKPT_OK) st = ckpt__oom(err, NULL, "the chunk digests");
    free(all);
    free(records);
    return st;
}

ckpt_status ckpt_writer_copy_tensor(ckpt_writer *w, size_t index, const ckpt_catalog *src, size_t src_index,
                                    uint64_t xxh3, ckpt_error *err) {
    const ckpt__piece *p;
    ckpt_status st = plain_source(w, src, src_index, &p, err);
    if (st) return st;
    const ckpt_tensor_info *from = ckpt_catalog_tensor(src, src_index);
    uint64_t *chunks = NULL;
    size_t count = 0;
    st = source_chunks(w, index, src, src_index, &chunks, &count, err);
    if (st == CKPT_OK) st = ckpt__writer_give_digest(w, index, from->nbytes, xxh3, chunks, count, err);
    free(chunks);
    if (st) return st;
    return ckpt__writer_pcopy(w, index, 0, ckpt__cat_source(src, p->file), p->offset, from->nbytes, err);
}

ckpt_status ckpt_writer_shares_blocks(const ckpt_writer *w, const ckpt_catalog *src, size_t src_file, int *shares,
                                      ckpt_error *err) {
    if (shares) *shares = 0;
    if (!w || !src || !shares || src_file >= ckpt_catalog_file_count(src))
        return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, NULL, NULL, -1,
                          "a writer, a catalog and one of its files are required");
    const ckpt__source *from = ckpt__cat_source(src, (uint32_t)src_file);
    *shares = from && ckpt__can_clone_into(from->fd, ckpt__writer_folder(w));
    return CKPT_OK;
}

ckpt_status ckpt_writer_copy_range(ckpt_writer *w, size_t index, const ckpt_catalog *src, size_t src_index,
                                   uint64_t nbytes, ckpt_error *err) {
    const ckpt__piece *p;
    ckpt_status st = plain_source(w, src, src_index, &p, err);
    if (st) return st;
    const ckpt_tensor_info *from = ckpt_catalog_tensor(src, src_index);
    bool known = index < ckpt_writer_tensor_count(w);
    uint64_t at = known ? ckpt__writer_tensor_written(w, index) : 0, end;
    /* A tensor that grew (or shrank) since the base copies the leading
     * bytes they share: the range must lie within the source's bytes (one
     * past the output tensor's is the writer's to refuse). */
    if (!ckpt__add_u64(at, nbytes, &end) || (end > from->nbytes && known && end <= ckpt__writer_tensor_nbytes(w, index)))
        return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, ckpt_catalog_file_path(src, from->file), from->name,
                          (int64_t)(p->offset + at),
                          "it holds %llu bytes, and the copy asks for its bytes [%llu, %llu + %llu)",
                          (unsigned long long)from->nbytes, (unsigned long long)at, (unsigned long long)at,
                          (unsigned long long)nbytes);
    return ckpt__writer_pcopy(w, index, at, ckpt__cat_source(src, p->file), p->offset + at, nbytes, err);
}
