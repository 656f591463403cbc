/*
 * format.h — the format interface: what a format reader provides, and what
 * it may do to the catalog it fills.
 *
 * A format is one table of functions (ckpt__format) in its own file under
 * src/formats/, plus one line in the registry (registry.c):
 *
 *   probe   how sure the format is that a file is its own, from the file's
 *           first bytes and its name;
 *   open    reads the file's metadata (never tensor data) into catalog
 *           entries: names, dtypes, shapes, and for each tensor where its
 *           bytes lie — its pieces.
 *
 * A piece is a box of the tensor (all of it, in the common case) whose
 * elements lie in one file: dense row-major from `offset`, or with element
 * strides (a torch view), byte-swapped (a big-endian file), or inside a
 * DEFLATE record (a re-zipped torch file).  That is all the engine needs to
 * read any slice of any tensor chunk by chunk: formats locate, the engine
 * moves bytes (swap, gather, inflate, slice, permute, cast — src/transform/).
 * Tensors assembled from chunks written by several processes (DCP) have
 * several pieces that tile the tensor.
 *
 * Formats read through sources (src/io/source.h), never descriptors, so a
 * format works unchanged over HTTP or from memory.
 */
#ifndef CKPT_FORMATS_FORMAT_H
#define CKPT_FORMATS_FORMAT_H

#include "../base/base.h"
#include "ckpt_gguf.h" /* ckpt_kv: a format adds typed pairs */
#include "../base/value.h"
#include "../io/beneath.h"
#include "../io/source.h"

/* Where one box of a tensor lies.  Arrays live as long as the catalog
 * (allocate them from ckpt__cat_arena). */
typedef struct ckpt__piece {
    uint32_t file;           /* the catalog's data file */
    uint64_t offset;         /* byte of the piece's element 0: in the file, or in the inflated record */
    const uint64_t *start;   /* origin in the tensor's coordinates; NULL: 0, … */
    const uint64_t *count;   /* extent per axis; NULL: the tensor's shape */
    const int64_t *strides;  /* element strides in the file; NULL: dense row-major over `count` */
    uint64_t record;         /* DEFLATE: the compressed data's offset in the file */
    uint64_t record_size;    /* DEFLATE: compressed bytes; 0 when the bytes are stored as they are */
    uint8_t big_endian;      /* the file stores elements big-endian */
    uint32_t crc;            /* the piece lies in the bytes of recorded CRC-32 crc - 1 (ckpt__cat_add_crc); 0: none */
} ckpt__piece;

/*
 * A CRC-32 a file records over a run of its bytes: a ZIP member's (torch.save
 * archives and the items of DCP files that hold them, .npz archives).  The
 * format declares each one at open (ckpt__cat_add_crc); ckpt_verify checks
 * every one, and loads and conversions check those whose bytes they read
 * whole (engine.c).
 */
typedef struct ckpt__recorded_crc {
    const char *name;       /* what it covers, for messages: the member's name (must live as long as the catalog) */
    uint64_t offset;        /* the covered bytes in the file, as they are stored (a DEFLATE stream when deflate) */
    uint64_t stored_size;   /* bytes at offset */
    uint64_t size;          /* bytes covered (inflated) */
    uint32_t crc32;
    bool deflate;
    /* Leading bytes the format read at open (an .npy header) and their
     * CRC-32: a load that reads the rest need not read them again. */
    uint64_t head;
    uint32_t head_crc32;
} ckpt__recorded_crc;

/* A tensor being added to a catalog. */
typedef struct ckpt__tensor_decl {
    const char *name;            /* UTF-8; must live as long as the catalog */
    ckpt_dtype dtype;
    uint32_t ndim;
    const uint64_t *shape;       /* must live as long as the catalog */
    /* Tensors that share bytes name the same storage (ckpt__cat_add_storage);
     * CKPT__OWN_STORAGE gives the tensor a storage of its own. */
    uint32_t storage;
    const ckpt__piece *pieces;   /* copied; one piece covering the tensor in the common case */
    uint32_t piece_count;
} ckpt__tensor_decl;

#define CKPT__OWN_STORAGE UINT32_MAX

/* ---- what a format may do to the catalog it fills ------------------------ */

/* The arena whose memory lives as long as the catalog.  Its budget
 * (arena->budget, ckpt__cat_budget) bounds what the metadata of the files
 * the catalog opened may cost: a parser charges what it allocates for what
 * it reads (base.h, ckpt__budget_charge). */
CKPT__HIDDEN ckpt__arena *ckpt__cat_arena(ckpt_catalog *c);
CKPT__HIDDEN ckpt__budget *ckpt__cat_budget(ckpt_catalog *c);

/* Adopts an opened source as the catalog's next data file (the catalog
 * closes it); *file receives its number. */
CKPT__HIDDEN ckpt_status ckpt__cat_add_source(ckpt_catalog *c, ckpt__source *src, uint32_t *file, ckpt_error *err);

/* The source of data file `file`. */
CKPT__HIDDEN ckpt__source *ckpt__cat_source(const ckpt_catalog *c, uint32_t file);

/* Opens `path` (a data file of a multi-file checkpoint: a shard) as what its
 * first bytes say it is, adding its tensors. */
CKPT__HIDDEN ckpt_status ckpt__cat_open_path(ckpt_catalog *c, const char *path, ckpt_error *err);

/* Opens a source for a name (the catalog's source options apply): a URL,
 * the file the user named as named, and any other local file — one the
 * checkpoint names, or one a listing found — beneath the checkpoint's
 * directory (io/beneath.h: CKPT_E_UNSAFE_PATH for a name that leads out of
 * it, or for what is not a regular file).  Its size adds to the catalog's
 * metadata budget. */
CKPT__HIDDEN ckpt_status ckpt__cat_open_source(ckpt_catalog *c, const char *name, ckpt__source **out,
                                               ckpt_error *err);

/* The local checkpoint's directory, or NULL for a remote one or a
 * caller's source. */
CKPT__HIDDEN const ckpt__beneath *ckpt__cat_root(const ckpt_catalog *c);

/* The checkpoint's directories, asked of its source — a local one beneath
 * its descriptor, a remote one by URL, a caller's through its table
 * (ckpt_source_ops' stat and list) — so that a directory of shards or a DCP
 * directory opens from any source that can list.  Whether `dir` can be
 * listed; its names (not starting with '.', sorted, malloc'ed: free with
 * ckpt__beneath_free_names). */
CKPT__HIDDEN bool ckpt__cat_can_list(const ckpt_catalog *c);
CKPT__HIDDEN ckpt_status ckpt__cat_list(ckpt_catalog *c, const char *dir, char ***names, size_t *count,
                                        ckpt_error *err);

/* A storage: `nbytes` bytes of `file` from `base` (for a DEFLATE record,
 * base is its compressed data and nbytes its inflated size), which tensors
 * may share.  Shared storages are what hub-style deduplication looks at. */
CKPT__HIDDEN ckpt_status ckpt__cat_add_storage(ckpt_catalog *c, uint32_t file, uint64_t base, uint64_t nbytes,
                                               uint32_t *storage, ckpt_error *err);

/* Declares a CRC-32 that data file `file` records; *index (may be NULL)
 * receives its number, for ckpt__piece.crc (number + 1). */
CKPT__HIDDEN ckpt_status ckpt__cat_add_crc(ckpt_catalog *c, uint32_t file, const ckpt__recorded_crc *crc,
                                           uint32_t *index, ckpt_error *err);

/* Adds a tensor.  Checks that the shape's size fits the dtype (whole
 * bytes, no overflow); the format has checked that its pieces lie inside
 * its files, and charged ckpt__cat_tensor_cost to the budget (with the
 * byte of the metadata that declares the tensor). */
CKPT__HIDDEN ckpt_status ckpt__cat_add_tensor(ckpt_catalog *c, const ckpt__tensor_decl *d, ckpt_error *err);
/* The bytes the catalog keeps for a tensor of `piece_count` pieces. */
CKPT__HIDDEN uint64_t ckpt__cat_tensor_cost(uint32_t piece_count);

/* A `__metadata__` entry of data file `file`; the strings must live as long
 * as the catalog.  The checkpoint's map is the union of the files' maps
 * (the first file's value wins). */
CKPT__HIDDEN ckpt_status ckpt__cat_add_metadata(ckpt_catalog *c, uint32_t file, const char *key, const char *value,
                                                ckpt_error *err);

/* The same with an encoded value (it must live as long as the catalog):
 * its JSON text is written only when a caller asks for the entry. */
CKPT__HIDDEN ckpt_status ckpt__cat_add_metadata_value(ckpt_catalog *c, uint32_t file, const char *key,
                                                      const ckpt__encoded *value, ckpt_error *err);

/* A GGUF key-value pair, copied (its strings and data must live as long
 * as the catalog), and its value in GGUF's encoding (gguf.h), whose text
 * becomes kv->json when a caller asks for the pair. */
CKPT__HIDDEN ckpt_status ckpt__cat_add_kv(ckpt_catalog *c, const ckpt_kv *kv, const ckpt__encoded *value,
                                          ckpt_error *err);
/* An entry of the checkpoint's own metadata (an index's), not of any one
 * file; the strings must live as long as the catalog.  The first value of
 * a key wins. */
CKPT__HIDDEN ckpt_status ckpt__cat_add_checkpoint_metadata(ckpt_catalog *c, const char *key, const char *value,
                                                           ckpt_error *err);

/* The object tree of a data file (see ckpt_catalog_tree_json), its
 * values in the catalog's arena (ckpt__cat_arena).  Several trees (torch
 * shards) are joined as {"__shards__": [...]}. */
CKPT__HIDDEN ckpt_status ckpt__cat_set_tree(ckpt_catalog *c, ckpt__value *tree, ckpt_error *err);
/* The same from its JSON text (a catalog received as bytes: wire.c). */
CKPT__HIDDEN ckpt_status ckpt__cat_add_tree(ckpt_catalog *c, const char *json, ckpt_error *err);

/* Sets the catalog's format (the last call wins; an index sets the
 * sharded variant after its shards). */
CKPT__HIDDEN void ckpt__cat_set_format(ckpt_catalog *c, ckpt_format format);
CKPT__HIDDEN ckpt_format ckpt__cat_format(const ckpt_catalog *c);

/* Sets the index file's path (sharded checkpoints). */
CKPT__HIDDEN ckpt_status ckpt__cat_set_index_path(ckpt_catalog *c, const char *path, ckpt_error *err);
/* The index counts parameters ("total_parameters" in its metadata, as
 * transformers' save_pretrained writes it): a conversion's index will too. */
CKPT__HIDDEN void ckpt__cat_set_index_counts_parameters(ckpt_catalog *c);

/* The globals ("module.name", sorted) the caller allowed beyond a format's
 * own allowlist (ckpt_catalog_options.allowed_globals; torch.h). */
CKPT__HIDDEN const char *const *ckpt__cat_allowed_globals(const ckpt_catalog *c, size_t *count);

/* A data file's own metadata pairs. */
CKPT__HIDDEN const ckpt__pairs *ckpt__cat_file_metadata(const ckpt_catalog *c, size_t file);
/* The checkpoint's metadata map (its values: ckpt__pairs_value, else text). */
CKPT__HIDDEN const ckpt__pairs *ckpt__cat_metadata(const ckpt_catalog *c);

/* What ckpt_verify is to check beyond the declared CRC-32s, as the formats'
 * verify hooks find it: tensors to hash, each with the XXH3-64 its file
 * records (ckpt__file_checks_add), and header digests already matched. */
typedef struct ckpt__digest {
    const ckpt_tensor_info *tensor;
    uint64_t xxh3;
} ckpt__digest;
/* A tensor's recorded chunk digests (CKPT_CHUNK_METADATA_KEY): `count`
 * of them from `first` in the checks' chunk_xxh3, for chunks of
 * chunk_bytes whose edges are the file's multiples of it (its data `phase`
 * bytes past one; base/chunk_hash.h). */
typedef struct ckpt__chunk_digests {
    const ckpt_tensor_info *tensor;
    uint64_t chunk_bytes, phase;
    size_t first, count;
} ckpt__chunk_digests;
typedef struct ckpt__file_checks {
    ckpt__buf digests; /* ckpt__digest */
    size_t headers;
    ckpt__buf chunks;     /* ckpt__chunk_digests */
    ckpt__buf chunk_xxh3; /* uint64_t: every record's digests */
} ckpt__file_checks;
static inline void ckpt__file_checks_free(ckpt__file_checks *c) {
    free(c->digests.data);
    free(c->chunks.data);
    free(c->chunk_xxh3.data);
}
static inline bool ckpt__file_checks_failed(const ckpt__file_checks *c) {
    return c->digests.failed || c->chunks.failed || c->chunk_xxh3.failed;
}
static inline bool ckpt__file_checks_add(ckpt__file_checks *c, const ckpt_tensor_info *t, uint64_t xxh3) {
    ckpt__buf_append(&c->digests, (const char *)&(ckpt__digest){t, xxh3}, sizeof(ckpt__digest));
    return !c->digests.failed;
}

/* ---- a format ------------------------------------------------------------- */

enum { CKPT__PROBE_NO = 0, CKPT__PROBE_FALLBACK = 1, CKPT__PROBE_NAME = 2, CKPT__PROBE_MAGIC = 3 };

typedef struct ckpt__format {
    const char *name;
    ckpt_format id; /* 0: as its file's name says (an index: the shards' format; ckpt__format_id) */
    /* How sure the format is that the file `name` starting with
     * head[0, n) is its own: CKPT__PROBE_*.  The highest wins; ties go to
     * the registry's order. */
    int (*probe)(const unsigned char *head, size_t n, const char *name);
    /* Reads `src` (named src->name) into the catalog.  Owns `src`: adopts
     * it as a data file (ckpt__cat_add_source) or closes it. */
    ckpt_status (*open)(ckpt_catalog *c, ckpt__source *src, ckpt_error *err);
    /* Whether `name`, one of several files with this format's suffix in a
     * directory, is the first of a set that it stands for (gguf-split's
     * -00001-of-N part); NULL: no file stands for others. */
    bool (*first_of_set)(const char *name);
    /* ckpt_verify: the checks file `file` records of itself beyond the
     * CRC-32s declared at open (safetensors: ckpt's XXH3-64 digests): those
     * it can make at once (a header's digest, counted in checks->headers),
     * and the tensors to hash with the digests recorded
     * (ckpt__file_checks_add).  Every file is offered to every hook: a hook
     * takes the files that carry its records.  NULL: none. */
    ckpt_status (*verify)(const ckpt_catalog *c, uint32_t file, ckpt__file_checks *checks, ckpt_error *err);
} ckpt__format;

/* The registry (registry.c): every format, and the file names that stand
 * for a checkpoint in a directory. */
CKPT__HIDDEN const ckpt__format *ckpt__format_probe(const unsigned char *head, size_t n, const char *name,
                                                    int *score);

/* Every format's verify hook on file `file` of a catalog. */
CKPT__HIDDEN ckpt_status ckpt__format_verify(const ckpt_catalog *c, uint32_t file, ckpt__file_checks *checks,
                                             ckpt_error *err);

/* The public id of a format the probe chose for `path` (an index of
 * shards: the shards' format, as the index's name says). */
CKPT__HIDDEN ckpt_format ckpt__format_id(const ckpt__format *f, const char *path);

/* A file whose best probe is only CKPT__PROBE_FALLBACK (safetensors'):
 * CKPT_OK when it may be a damaged safetensors file, else
 * CKPT_E_UNKNOWN_FORMAT saying what it looks like (text, HTML, a ZIP
 * archive that is not torch's, gzip…) and which formats ckpt reads — for
 * a URL that answered with a web page, also the directory form with a
 * trailing '/'.  `head` holds the first n bytes of the file's `size`. */
CKPT__HIDDEN ckpt_status ckpt__format_check_unclaimed(const unsigned char *head, size_t n, uint64_t size,
                                                      const char *path, ckpt_error *err);

/* Finds the checkpoint in directory `dir` of a place — the catalog's source
 * table and its user pointer, asked directly so that the registry never
 * calls back into the catalog — (the Hugging Face layout and each format's own names, in the registry's order
 * of preference) into a malloc'ed path; in one that cannot be listed (a
 * URL ending in '/'), only the exact names are tried. */
CKPT__HIDDEN ckpt_status ckpt__format_find_in_dir(const ckpt_source_ops *place, void *user, const char *dir,
                                                  char **found, ckpt_error *err);

/* The formats, each defined in its own file. */
CKPT__HIDDEN extern const ckpt__format ckpt__format_safetensors; /* safetensors.c */
CKPT__HIDDEN extern const ckpt__format ckpt__format_index;       /* shards.c: *.index.json */
CKPT__HIDDEN extern const ckpt__format ckpt__format_torch_zip;   /* torch.c */
CKPT__HIDDEN extern const ckpt__format ckpt__format_torch_legacy;
CKPT__HIDDEN extern const ckpt__format ckpt__format_torch_tar;   /* refused, with advice */
CKPT__HIDDEN extern const ckpt__format ckpt__format_gguf;        /* gguf.c */
CKPT__HIDDEN extern const ckpt__format ckpt__format_npy;         /* npy.c */
CKPT__HIDDEN extern const ckpt__format ckpt__format_npz;         /* npz.c */
CKPT__HIDDEN extern const ckpt__format ckpt__format_flax_msgpack; /* msgpack.c */

#endif
