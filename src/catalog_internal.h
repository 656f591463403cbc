/* catalog_internal.h — what the glue modules (writer, convert) may see of a
 * catalog beyond the public API. */
#ifndef CKPT_CATALOG_INTERNAL_H
#define CKPT_CATALOG_INTERNAL_H

#include "base/base.h"

/* Where storage number `storage` (ckpt_tensor_info.storage) lives: the
 * byte offset of its data in its file, and its size.  False if unknown. */
CKPT__HIDDEN bool ckpt__catalog_storage(const ckpt_catalog *catalog, uint32_t storage, uint64_t *base,
                                        uint64_t *nbytes);

/* A data file's own __metadata__ pairs. */
CKPT__HIDDEN const ckpt__pairs *ckpt__catalog_file_meta(const ckpt_catalog *catalog, size_t file);

/* The open descriptor of a catalog's i-th data file. */
CKPT__HIDDEN int ckpt__catalog_fd(const ckpt_catalog *catalog, size_t file);

#endif
