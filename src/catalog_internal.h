/* catalog_internal.h — what the glue modules (engine, writer, convert,
 * verify) may see of a catalog beyond the public API. */
#ifndef CKPT_CATALOG_INTERNAL_H
#define CKPT_CATALOG_INTERNAL_H

#include "base/base.h"
#include "formats/format.h"
#include "io/source.h"

/* Where storage number `storage` (ckpt_tensor_info.storage) lives: the
 * byte offset of its data in its file, and its size.  False if unknown. */
CKPT__HIDDEN bool ckpt__catalog_storage(const ckpt_catalog *catalog, uint32_t storage, uint64_t *base,
                                        uint64_t *nbytes);

/* The CRC-32s the catalog's files record (ckpt__cat_add_crc): how many,
 * and the i-th (NULL past the end) with its data file. */
CKPT__HIDDEN size_t ckpt__catalog_crc_count(const ckpt_catalog *catalog);
CKPT__HIDDEN const ckpt__recorded_crc *ckpt__catalog_crc(const ckpt_catalog *catalog, size_t i, uint32_t *file);
/* A tensor whose bytes lie in recorded CRC-32 i, for messages; NULL: none. */
CKPT__HIDDEN const char *ckpt__catalog_crc_tensor(const ckpt_catalog *catalog, size_t i);

/* Whether the catalog's index counts parameters (ckpt__cat_set_index_counts_parameters). */
CKPT__HIDDEN bool ckpt__cat_index_counts_parameters(const ckpt_catalog *catalog);

/* GGUF key-value `key` as read, in *kv (its typed JSON not written: a
 * vocabulary's arrays stay bytes), and its value in GGUF's encoding
 * (ckpt__gguf_encoding, base.h's ckpt__encoded); NULL when absent. */
CKPT__HIDDEN const ckpt__encoded *ckpt__catalog_kv_encoded(const ckpt_catalog *catalog, const char *key,
                                                         const ckpt_kv **kv);

/* The source of a catalog's i-th data file. */
CKPT__HIDDEN ckpt__source *ckpt__catalog_source(const ckpt_catalog *catalog, size_t file);

/* The index of a tensor info in its catalog, or SIZE_MAX when it is not
 * one of the catalog's. */
CKPT__HIDDEN size_t ckpt__catalog_index_of(const ckpt_catalog *catalog, const ckpt_tensor_info *tensor);

/* Where the i-th tensor's bytes lie: *count pieces that tile it. */
CKPT__HIDDEN const ckpt__piece *ckpt__catalog_pieces(const ckpt_catalog *catalog, size_t tensor, uint32_t *count);

/* The catalog's shared read-only mapping of a data file (made on first
 * use, released with the catalog); *base is NULL for an empty file. */
CKPT__HIDDEN ckpt_status ckpt__catalog_map(ckpt_catalog *catalog, size_t file, const void **base, ckpt_error *err);

/* How its local files are read (ckpt_catalog_options.io; CKPT_IO_DIRECT:
 * around the page cache). */
CKPT__HIDDEN ckpt_io_mode ckpt__catalog_io(const ckpt_catalog *catalog);

/* Direct mode: drops from the page cache what reads of the catalog's
 * local files brought in (the few that could not be direct). */
CKPT__HIDDEN void ckpt__catalog_drop_cache(const ckpt_catalog *catalog);

/* A DEFLATE reader of `record` kept from an earlier read, positioned at or
 * before `offset` (NULL: none); hand it back with ckpt__catalog_keep_inflater. */
typedef struct ckpt__inflater ckpt__inflater;
CKPT__HIDDEN ckpt__inflater *ckpt__catalog_take_inflater(ckpt_catalog *catalog, const ckpt__source *src,
                                                         uint64_t record, uint64_t offset);
CKPT__HIDDEN void ckpt__catalog_keep_inflater(ckpt_catalog *catalog, ckpt__inflater *inflater);

/* ---- for the catalog's encoding (wire.c) ----------------------------------- */

/* An empty catalog with these options (NULL: the defaults), filled by a
 * decoder through the ckpt__cat_* functions of formats/format.h. */
CKPT__HIDDEN ckpt_status ckpt__catalog_new(const ckpt_catalog_options *options, ckpt_catalog **out, ckpt_error *err);

/* Where the catalog's files are: `path` is what the user named — a
 * directory (`is_dir`), or a file, which is then opened as named while
 * every other file is opened beneath its directory (io/beneath.h); a URL's
 * are asked of its server. */
/* The credentials a remote name carries — "user:password@", and the query
 * of a store whose query is credentials (an Azure SAS token), for the
 * names beneath it — into the catalog's source options, as
 * ckpt_catalog_open_ex takes them, so that a rank opening the files rank 0
 * names (which carry none: wire.c) sends them too; *clean: the name
 * without them (malloc'ed; NULL when it has none).  *as_file: the name
 * without its user:password@ but with its query (malloc'ed), the one to
 * open should the name be a file rather than a directory — which only
 * rank 0 knew. */
CKPT__HIDDEN ckpt_status ckpt__catalog_take_credentials(ckpt_catalog *catalog, const char *path, char **clean,
                                                        char **as_file, ckpt_error *err);
CKPT__HIDDEN ckpt_status ckpt__catalog_set_root(ckpt_catalog *catalog, const char *path, bool is_dir,
                                                ckpt_error *err);

/* Every file is open: the directory is let go (a catalog holds only its
 * files' descriptors). */
CKPT__HIDDEN void ckpt__catalog_opened(ckpt_catalog *catalog);

/* Storages: how many, and the i-th's file, base and size. */
CKPT__HIDDEN size_t ckpt__catalog_storage_count(const ckpt_catalog *catalog);
CKPT__HIDDEN void ckpt__catalog_storage_at(const ckpt_catalog *catalog, size_t i, uint32_t *file, uint64_t *base,
                                           uint64_t *nbytes);

#endif
