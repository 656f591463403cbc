/* copy_tensor.c — ckpt_writer_copy_tensor: a tensor of an open checkpoint
 * copied whole into a writer by the kernel (copy_file_range: a reflink
 * where the file system shares blocks and the offsets allow), with the
 * digest its bytes are known by.  Incremental saves build on it: a tensor
 * whose digest equals the base checkpoint's is cloned, not written. */
#include "catalog_internal.h"
#include "writer_internal.h"

/* The tensor's bytes as they lie in one file, contiguous and as they are
 * (no DEFLATE, no byte swap, no strides), or NULL. */
static const ckpt__piece *stored_plainly(const ckpt_catalog *cat, size_t index) {
    uint32_t count;
    const ckpt__piece *p = ckpt__catalog_pieces(cat, index, &count);
    if (count != 1 || p->start || p->count || p->strides || p->record_size || p->big_endian) return NULL;
    return p;
}

ckpt_status ckpt_writer_copy_tensor(ckpt_writer *w, size_t index, const ckpt_catalog *src, size_t src_index,
                                    uint64_t xxh3, ckpt_error *err) {
    if (!w || !src || src_index >= ckpt_catalog_tensor_count(src))
        return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, NULL, NULL, -1,
                          "a writer, a catalog and one of its tensors are required");
    const ckpt_tensor_info *from = ckpt_catalog_tensor(src, src_index);
    const char *path = ckpt_catalog_file_path(src, from->file);
    const ckpt__piece *p = stored_plainly(src, src_index);
    if (!p)
        return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, path, from->name, -1,
                          "its bytes are not stored as they are (compressed, byte-swapped or in pieces): write them");
    ckpt_status st = ckpt__writer_give_digest(w, index, from->nbytes, xxh3, err);
    if (st) return st;
    return ckpt__writer_pcopy(w, index, 0, ckpt__cat_source(src, p->file), p->offset, from->nbytes, err);
}
