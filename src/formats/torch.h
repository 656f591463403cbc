/*
 * torch.h — torch.save files (pytorch torch/serialization.py, torch/_utils.py,
 * torch/_weights_only_unpickler.py).
 *
 * A zip file holds <folder>/data.pkl, a pickle whose tensors are
 * torch._utils._rebuild_tensor_v2/v3 calls on persistent-id storages
 * ('storage', StorageType, key, location, numel) whose bytes are the record
 * <folder>/data/<key>.  ckpt reads the pickle with torch's allowlist, never
 * executing it, and turns it into tensors (name, dtype, shape, strides,
 * storage, byte offset) plus a JSON tree of everything else.
 */
#ifndef CKPT_FORMATS_TORCH_H
#define CKPT_FORMATS_TORCH_H

#include "../base/base.h"
#include "../io/source.h"
#include "format.h"
#include "pickle.h"

typedef struct ckpt__torch_tensor {
    const char *name; /* dotted path in the object tree, arena */
    ckpt_dtype dtype;
    uint32_t ndim;
    uint64_t *shape;  /* arena */
    int64_t *strides; /* arena; NULL when dense row-major */
    uint64_t numel, nbytes;
    uint64_t offset;        /* absolute byte offset of element [0, 0, …] */
    uint32_t storage;       /* index into storages */
    uint64_t storage_begin; /* byte offset of the tensor's first element in its storage */
} ckpt__torch_tensor;

typedef struct ckpt__torch_storage {
    const char *key;
    uint64_t offset; /* absolute byte offset of the storage's data (compressed: of its DEFLATE data) */
    uint64_t nbytes;
    ckpt_dtype dtype;
    uint64_t comp_size; /* non-zero: the record is DEFLATE-compressed, this many bytes */
    uint32_t crc;       /* its record's CRC-32: index into crcs, plus 1; 0: none recorded */
} ckpt__torch_storage;

typedef struct ckpt__torch_file {
    size_t count;
    ckpt__torch_tensor *tensors; /* malloc'ed, in tree order */
    size_t storage_count;
    ckpt__torch_storage *storages; /* malloc'ed */
    bool big_endian;
    ckpt__value *tree; /* the object tree, in the arena it was read into */
    /* The archive's recorded CRC-32s (every record's that has one; offsets
     * in the archive's source), for ckpt__cat_add_crc; malloc'ed. */
    size_t crc_count;
    ckpt__recorded_crc *crcs;
} ckpt__torch_file;

/* The unpickler's judge for a catalog's torch pickles: torch's allowlist
 * (CKPT__PK_ALLOW), or what the caller allowed with
 * ckpt_catalog_options.allowed_globals (CKPT__PK_ALLOW_STATE: objects are
 * only rebuilt from their state); `catalog` NULL: torch's allowlist alone. */
CKPT__HIDDEN ckpt__pk_allowed ckpt__torch_allow(const char *module, const char *name, void *catalog);

/* Reads a torch.save zip archive. */
/* `allow` (NULL: torch's allowlist) judges the pickle's globals. */
CKPT__HIDDEN ckpt_status ckpt__torch_read_zip(ckpt__source *src, ckpt__pk_allow_fn allow, void *allow_user,
                                              ckpt__arena *arena, ckpt__torch_file *out, ckpt_error *err);
/* How an archive embedded in another checkpoint (a DCP item) is read. */
typedef struct ckpt__torch_options {
    /* Tensors are named "<prefix>.<path>", a tensor at the root "<prefix>". */
    const char *name_prefix;
    /* The pickle's allowlist; NULL: torch's weights-only allowlist. */
    ckpt__pk_allow_fn allow;
    void *allow_user;
} ckpt__torch_options;

/* ckpt__torch_read_zip with options (NULL: the defaults). */
CKPT__HIDDEN ckpt_status ckpt__torch_read_zip_ex(ckpt__source *src, ckpt__arena *arena, const ckpt__torch_options *o,
                                                 ckpt__torch_file *out, ckpt_error *err);

CKPT__HIDDEN void ckpt__torch_file_free(ckpt__torch_file *file);

/* Declares the archive's recorded CRC-32s to the catalog (data file
 * `file`, the archive starting at byte `at` of it); a storage's crc k is
 * then the catalog's number *first + k (as ckpt__piece.crc). */
CKPT__HIDDEN ckpt_status ckpt__torch_add_crcs(ckpt_catalog *c, uint32_t file, const ckpt__torch_file *tf, uint64_t at,
                                              uint32_t *first, ckpt_error *err);


#endif
