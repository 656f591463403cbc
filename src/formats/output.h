/*
 * output.h — the output-format interface: what a format provides to be
 * written, and what it may do with the writer that writes it.
 *
 * The writer (src/writer.c) is format-neutral: it takes declarations
 * (names, dtypes, shapes, shared storages), deduplicates as the hub does,
 * receives tensor bytes at computed offsets from any thread, and commits
 * atomically (a staged directory, or a journal when replacing files in a
 * directory that holds others).  An output format is one table
 * (ckpt__output_format) in its format's file plus one line in the output
 * registry (writer_formats in src/formats/registry.c):
 *
 *   suffixes   the file-name suffixes that name it, and layouts: the
 *              shapes its output may take (one file, that file's split
 *              parts, a directory) — what the destination rule
 *              (ckpt__output_destination) decides by;
 *   plan       which file each tensor goes to, and the files' names;
 *   layout     a file's leading bytes (its header) and each of its
 *              tensors' offsets — everything is known before any data;
 *   finish     after the data: patches computed from it (checksums,
 *              CRC-32s) and side files written last (an index, a
 *              `.metadata`);
 *   owns       which file names in a directory belong to a checkpoint of
 *              this format (replaced ones are cleaned up after a commit).
 */
#ifndef CKPT_FORMATS_OUTPUT_H
#define CKPT_FORMATS_OUTPUT_H

#include "../base/base.h"
#include "ckpt_dcp.h"  /* the format options of writer options */
#include "ckpt_gguf.h"
#include "../base/value.h"

typedef struct ckpt__output ckpt__output; /* the writer, as an output format sees it */

/* A byte range of a tensor that a format places on its own (see parts). */
typedef struct ckpt__out_part {
    uint64_t begin, nbytes; /* the tensor's bytes [begin, begin + nbytes) */
    uint32_t file;
    uint64_t offset;        /* where they go in that file */
    uint32_t crc32;         /* after the data, with CKPT__OUT_CRC32 */
} ckpt__out_part;

/* A declared tensor.  A tensor deduplicated away has file CKPT__OUT_NONE. */
typedef struct ckpt__out_tensor {
    const char *name;
    ckpt_dtype dtype;
    uint32_t ndim;
    const uint64_t *shape;
    uint64_t nbytes;
    const ckpt_tensor_storage *storage; /* id 0: shares nothing */
    uint32_t file;   /* set by plan */
    uint64_t offset; /* set by layout: the byte of its data in its file */
    uint64_t xxh3;   /* after the data, with CKPT__OUT_XXH3: the XXH3-64 of its bytes */
    /* Set by layout for a tensor the format records chunk digests of
     * (base/chunk_hash.h; arena memory): chunk_count digests of chunks of
     * chunk_bytes, edges at the file's multiples of it; filled after the
     * data, with CKPT__OUT_XXH3.  chunk_count 0: none. */
    uint64_t chunk_bytes;
    uint64_t *chunk_xxh3;
    uint32_t chunk_count;
    uint32_t crc32;  /* after the data, with CKPT__OUT_CRC32: their CRC-32 */
    /* A tensor the format cuts into byte ranges of several files (DCP's
     * ranks): set by plan (arena memory), the parts tiling the tensor's
     * bytes in order; `file` is then part 0's, `offset` unused.  Bytes are
     * routed to their part as they arrive. */
    ckpt__out_part *parts;
    uint32_t part_count;
} ckpt__out_tensor;

#define CKPT__OUT_NONE UINT32_MAX

enum {
    CKPT__OUT_XXH3 = 1u,  /* the writer hashes each tensor's bytes (in order) */
    CKPT__OUT_CRC32 = 2u, /* the writer computes each tensor's (each part's) CRC-32, from bytes in any order */
};

/* The shapes an output may take (ckpt__output_format.layouts). */
enum {
    CKPT__LAYOUT_FILE = 1u,  /* one file, at a name ending in one of its suffixes */
    CKPT__LAYOUT_PARTS = 2u, /* with max_shard_size: that file's parts beside it, named after its stem */
    CKPT__LAYOUT_DIR = 4u,   /* a directory of files (shards and an index, ranks' files) */
};

typedef struct ckpt__output_format {
    const char *name;
    ckpt_format id;
    /* The file-name suffixes that name this format as a destination
     * (NULL-terminated; matched ignoring ASCII case; none: only a
     * directory, or asked for by id). */
    const char *const *suffixes;
    unsigned layouts; /* CKPT__LAYOUT_* */
    /* Sets every kept tensor's file (ckpt__out_tensor.file) and the files'
     * names (ckpt__out_set_files). */
    ckpt_status (*plan)(ckpt__output *o, ckpt_error *err);
    /* File f's leading bytes into `head` (written at offset 0), each of its
     * tensors' offsets, and its size (ckpt__out_set_file_size). */
    ckpt_status (*layout)(ckpt__output *o, uint32_t file, ckpt__buf *head, ckpt_error *err);
    /* After every tensor's bytes: patches and side files.  May be NULL. */
    ckpt_status (*finish)(ckpt__output *o, ckpt_error *err);
    /* Whether `name` (a file name in the output directory) is a file a
     * checkpoint of this format with this prefix would use; prefix NULL:
     * with any prefix (ckpt__output_owns_any). */
    bool (*owns)(const char *prefix, const char *name);
    /* What the writer computes as data streams (CKPT__OUT_*), for these
     * options. */
    unsigned (*needs)(const ckpt_writer_options *options);
    /* Whether tensors on one storage are written once (the hub's
     * deduplication, `removed → kept` in the metadata); false: every
     * tensor is written as its own bytes (GGUF shares nothing). */
    bool dedup;
    /* Refuses a tensor the format cannot hold (a dtype it has no name for,
     * too many axes), naming it; NULL: every tensor. */
    ckpt_status (*accepts)(const char *path, const char *name, ckpt_dtype dtype, uint32_t ndim, const uint64_t *shape,
                           ckpt_error *err);
    /* Whether a conversion carries a source's metadata into this format
     * only from a source of the same format (GGUF's typed key-values), or
     * when the caller asks (ckpt_writer_options.source_metadata); false:
     * from any source. */
    bool own_metadata_only;
    /* Writer option metadata_json's entries as this format stores them:
     * keys and value texts (malloc'ed arrays and strings, the caller frees
     * each); a failure's reason in `why`.  NULL: as GGUF's types them
     * (ckpt__output_metadata_pairs) — ckpt.h's typed values, which other
     * formats then store as text. */
    ckpt_status (*metadata_pairs)(const char *json_text, char ***keys, char ***values, size_t *count, char *why,
                                  size_t why_len);
} ckpt__output_format;

/* ---- what an output format may ask of the writer --------------------------- */

CKPT__HIDDEN const ckpt_writer_options *ckpt__out_options(const ckpt__output *o);
/* The files' name prefix: a directory output's ("model" by default), or
 * a file output's stem (its name without the suffix), which its split
 * parts and their index are named after. */
CKPT__HIDDEN const char *ckpt__out_prefix(const ckpt__output *o);
/* Whether the output is a directory (else the file at the path, or its
 * parts beside it). */
CKPT__HIDDEN bool ckpt__out_directory(const ckpt__output *o);
/* The output's path as the caller gave it (normalised). */
CKPT__HIDDEN const char *ckpt__out_path(const ckpt__output *o);
/* An arena that lives as long as the writer. */
CKPT__HIDDEN ckpt__arena *ckpt__out_arena(ckpt__output *o);
/* A slot for the format's own state between plan, layout and finish
 * (allocate it from the arena). */
CKPT__HIDDEN void **ckpt__out_format_state(ckpt__output *o);

/* Declared tensors, in declaration order. */
CKPT__HIDDEN size_t ckpt__out_count(const ckpt__output *o);
CKPT__HIDDEN ckpt__out_tensor *ckpt__out_tensor_at(ckpt__output *o, size_t i);

/* Metadata every file carries (file-level), and the checkpoint's own
 * (placed by the format: the single file's, or an index's). */
CKPT__HIDDEN const ckpt__pairs *ckpt__out_file_metadata(const ckpt__output *o);
CKPT__HIDDEN const ckpt__pairs *ckpt__out_checkpoint_metadata(const ckpt__output *o);
/* The object tree under checkpoint-metadata `key` ("ckpt.torch_tree"):
 * the one a conversion handed over as values, else the text a caller set
 * read (CKPT_E_INVALID_ARGUMENT when it is not JSON); *tree NULL: none.
 * Its values live as long as the writer. */
CKPT__HIDDEN ckpt_status ckpt__out_tree(ckpt__output *o, const char *key, const ckpt__value **tree, ckpt_error *err);

/* rank[i]: the first tensor declared on i's storage, or i; with
 * `contiguous_only`, views that are not contiguous count as storages of
 * their own (as they are once made contiguous). */
CKPT__HIDDEN ckpt_status ckpt__out_storage_ranks(const ckpt__output *o, size_t *rank, bool contiguous_only,
                                                 ckpt_error *err);

/* plan: tensor i's bytes lie inside tensor `kept`'s (a view of a storage
 * the format writes once): it gets no place of its own (file
 * CKPT__OUT_NONE), bytes sent for it are dropped, and
 * ckpt_writer_tensor_kept names `kept`. */
CKPT__HIDDEN void ckpt__out_same_bytes(ckpt__output *o, size_t i, size_t kept);

/* Sets the output files: `count` names, relative to the output directory
 * (a directory output's path, else the directory holding the path). */
CKPT__HIDDEN ckpt_status ckpt__out_set_files(ckpt__output *o, size_t count, const char *const *names, ckpt_error *err);
CKPT__HIDDEN size_t ckpt__out_file_count(const ckpt__output *o);
/* The final path of file f. */
CKPT__HIDDEN const char *ckpt__out_file_path(const ckpt__output *o, uint32_t f);
CKPT__HIDDEN void ckpt__out_set_file_size(ckpt__output *o, uint32_t f, uint64_t size);

/* finish: writes `n` bytes at `offset` of file f (over its reserved
 * space). */
CKPT__HIDDEN ckpt_status ckpt__out_patch(ckpt__output *o, uint32_t f, uint64_t offset, const void *data, size_t n,
                                         ckpt_error *err);
/* finish: a side file (an index), published after the data files. */
CKPT__HIDDEN ckpt_status ckpt__out_add_side_file(ckpt__output *o, const char *name, const void *data, size_t n,
                                                 ckpt_error *err);

/* `owns` of a format that writes one file, never a directory of them:
 * false for every name.  (Inline, with the next one, so that a format's
 * file never calls back into the registry that lists it.) */
static inline bool ckpt__out_owns_none(const char *prefix, const char *name) {
    (void)prefix, (void)name;
    return false;
}
/* `needs` of a format whose records carry CRC-32s (ZIP archives). */
static inline unsigned ckpt__out_needs_crc32(const ckpt_writer_options *options) {
    (void)options;
    return CKPT__OUT_CRC32;
}

/* The output formats (each in its format's file). */
CKPT__HIDDEN extern const ckpt__output_format ckpt__output_safetensors; /* safetensors.c */
CKPT__HIDDEN extern const ckpt__output_format ckpt__output_gguf;        /* gguf_write.c */
CKPT__HIDDEN extern const ckpt__output_format ckpt__output_npz;         /* npz.c */
CKPT__HIDDEN extern const ckpt__output_format ckpt__output_flax_msgpack; /* msgpack.c */
CKPT__HIDDEN extern const ckpt__output_format ckpt__output_dcp;         /* dcp_output.c */
CKPT__HIDDEN extern const ckpt__output_format ckpt__output_torch;       /* torch_write.c */
CKPT__HIDDEN extern const ckpt__output_format ckpt__output_npy;         /* npy.c */

/* metadata_json's entries for output format f: its metadata_pairs, else
 * GGUF's (registry.c). */
CKPT__HIDDEN ckpt_status ckpt__output_metadata_pairs(const ckpt__output_format *f, const char *json_text, char ***keys,
                                                     char ***values, size_t *count, char *why, size_t why_len);

/* The output format for an id (registry.c); NULL when ckpt cannot write it. */
CKPT__HIDDEN const ckpt__output_format *ckpt__output_format_for(ckpt_format id);

/*
 * The destination rule — one for every entry point (ckpt_writer_create,
 * the conversions, the CLI and the bindings through
 * ckpt_destination_resolve; documented there):
 *   1. a path ending in '/', or naming an existing directory, is a
 *      directory: of options->format, else safetensors; a format without
 *      a directory layout is refused, naming a file to give instead;
 *   2. else a name ending in an output format's suffix is that format's
 *      file (or, with max_shard_size, its parts beside it);
 *      options->format, when set, must be that format;
 *   3. else a name ending in a checkpoint suffix ckpt does not write
 *      (an index, a DCP part, .ckpt, .h5, .onnx, …) is refused, naming it
 *      and listing what ckpt writes;
 *   4. else (no checkpoint suffix): a directory of options->format (else
 *      safetensors) when it has a directory layout, or a file of that
 *      name for a one-file format asked for by id.
 * Refusals are CKPT_E_INVALID_ARGUMENT naming the path.
 */
typedef struct ckpt__destination {
    const ckpt__output_format *fmt;
    bool directory;
    size_t suffix_len; /* a file: the length of the suffix that named it (0: none) */
} ckpt__destination;
CKPT__HIDDEN ckpt_status ckpt__output_destination(const char *path, const ckpt_writer_options *options,
                                                  ckpt__destination *out, ckpt_error *err);

/* Whether a file of a model directory is a checkpoint's (an output
 * format's file, an index, a DCP part, another framework's weights):
 * what copy_files_from leaves behind. */
CKPT__HIDDEN bool ckpt__checkpoint_file_name(const char *name);

/* Whether `name` (a plain file name) is a file some output format owns
 * under some prefix: its `owns` with a NULL prefix.  The one rule for what
 * a commit's journal may name, and so what recovering an interrupted commit
 * may remove or publish (io/commit.h): the files a replacement (`--force`)
 * may remove are those its format owns, and a journal found on disk does
 * not say which format and prefix wrote it.  Linear in the name's length. */
CKPT__HIDDEN bool ckpt__output_owns_any(const char *name);

#endif
