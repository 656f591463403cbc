/*
 * ckpt.h — the public interface of libckpt, and its manual.
 *
 * libckpt reads, writes and converts model checkpoints that may be far larger
 * than memory, with a memory footprint that does not grow with the model.
 *
 * The shape of the library
 * ------------------------
 *   path ──ckpt_catalog_open──▶ catalog ──read / view──▶ your buffers
 *                                  │
 *                                  └──plan──ckpt_convert_plan──▶ writer ──▶ files
 *
 * - A *catalog* is what opening a checkpoint gives: names, dtypes, shapes and
 *   the location of every tensor's bytes.  Opening reads headers only, never
 *   tensor data.
 * - ckpt_verify re-reads a checkpoint against the checksums a writer with
 *   `checksums` set records.
 * - A *writer* declares every tensor (name, dtype, shape) first, so that the
 *   header, the shard layout and the index are known before any data is
 *   written; data then arrives tensor by tensor or chunk by chunk, in any
 *   order, and is written in place.  Nothing appears under a final name until
 *   ckpt_writer_commit() succeeds.
 *
 * The headers
 * -----------
 * - <ckpt.h> (this one): the stable core — statuses and errors, dtypes,
 *   formats, catalogs, plans, load, convert, verify, writers.
 * - <ckpt_gguf.h>: GGUF's typed key-value pairs, ggml's type numbers and
 *   GGUF output's own options.
 * - <ckpt_dcp.h>: DCP output's own options.
 * - <ckpt_collective.h>: many processes, each with its part (communicators,
 *   collective load, convert and save, the shard writer).
 * - <ckpt_mpi.h>: a communicator over MPI (libckpt_mpi).
 * Each includes <ckpt.h>; they version together (CKPT_VERSION_*).
 *
 * Formats (this version)
 * ----------------------
 * - safetensors: a single `.safetensors` file, byte-compatible with
 *   huggingface/safetensors in both directions.
 * - Hugging Face sharded safetensors: `model-00001-of-00003.safetensors` files
 *   with `model.safetensors.index.json`, packed exactly as
 *   huggingface_hub's split_torch_state_dict_into_shards packs them.
 * - PyTorch distributed checkpoints (torch.distributed.checkpoint, "DCP"):
 *   a directory with `.metadata` and the ranks' `__<rank>_<n>.distcp`
 *   files, read without torch and without executing its pickles; each
 *   tensor is assembled from the chunks the ranks wrote.  Also the
 *   per-rank safetensors files of DCP's Hugging Face storage layer
 *   (DCP_SHARDING_INFO).  Non-tensor entries (step counters, optimizer
 *   hyper-parameters) are kept in the object tree.
 * - PyTorch torch.save files, read without executing anything: the zip
 *   format, the legacy stream format, re-zipped (DEFLATE) archives and
 *   `pytorch_model.bin.index.json` shards.  The pickle is read with
 *   torch's weights-only allowlist; the non-tensor values are kept as JSON
 *   (ckpt_catalog_tree_json).  A state dict is written as torch.save
 *   writes it (`.pt`, `.pth`, `.bin`: CKPT_FORMAT_TORCH).
 * - GGUF (llama.cpp's format) in both directions, checked against gguf-py:
 *   `.gguf` files and gguf-split parts (open the first), every tensor type
 *   (quantized blocks kept as CKPT_Q4_0 ... dtypes, dequantized or
 *   quantized by casts), typed key-values (ckpt_catalog_kv, in <ckpt_gguf.h>), big-endian
 *   files; written as GGUFWriter writes them (ckpt_writer_options.format).
 * - NumPy `.npy` files (every header version; Fortran order and big-endian
 *   data read as such) and `.npz` archives (stored or DEFLATE members);
 *   both written as np.save and np.savez write them.
 *
 * Where a writer writes — which format, one file, its split parts or a
 * directory — one rule decides for every entry point: see
 * ckpt_destination_resolve.
 * - Flax msgpack files (flax.serialization; transformers'
 *   `flax_model.msgpack` and its sharded `flax_model.msgpack.index.json`),
 *   arrays over 1 GiB in Flax's chunked layout included; the document's
 *   structure and non-tensor values are kept as JSON.
 *
 * Conventions
 * -----------
 * - Every fallible function returns a ckpt_status; CKPT_OK is 0.  When the
 *   caller passes a ckpt_error, it receives the file, the tensor, the byte
 *   offset and a sentence describing what was expected.  Pass NULL to skip it.
 * - The library never aborts, never prints and keeps no global state: every
 *   object is independent, and distinct objects may be used from distinct
 *   threads.  A catalog may be read from many threads at once.
 * - Ownership is in the names: *_open / *_create give an object that the
 *   matching *_close / *_free releases; both accept NULL.  Pointers returned
 *   by a catalog (names, shapes, views) live as long as the catalog.
 * - Sizes and offsets are uint64_t.  Every product of untrusted numbers is
 *   overflow-checked.
 */
#ifndef CKPT_H
#define CKPT_H

#include <stddef.h>
#include <stdint.h>

#include "ckpt_status.h"

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32)
#define CKPT_API
#elif defined(__GNUC__)
#define CKPT_API __attribute__((visibility("default")))
#else
#define CKPT_API
#endif

#define CKPT_VERSION_MAJOR 0
#define CKPT_VERSION_MINOR 1
#define CKPT_VERSION_PATCH 0
#define CKPT_VERSION_STRING "0.1.0"

/* The library's version as "MAJOR.MINOR.PATCH" (may differ from the header's
 * CKPT_VERSION_STRING when a program runs against a newer shared library). */
CKPT_API const char *ckpt_version(void);

/* ------------------------------------------------------------------------ */
/* Status codes and errors                                                  */
/* ------------------------------------------------------------------------ */

/*
 * Statuses.  Every fallible function returns a ckpt_status: CKPT_OK (0) or
 * a category of failure, what a caller acts on (retry a CKPT_E_NETWORK, fix
 * the credentials of a CKPT_E_AUTH, report a CKPT_E_CORRUPT file).  Where
 * it does not say which rule broke, ckpt_error.detail does (a ckpt_detail:
 * CKPT_D_DATA_HOLE, bytes between tensors belong to no tensor).  Both lists,
 * with their stable numbers and meanings, are the table of ckpt_status.h;
 * details keep the numbers they had as statuses before 0.1.
 */
#define CKPT__STATUS_ENUM(name, number, message) name = number,
#define CKPT__DETAIL_ENUM(name, number, category, message) name = number,
typedef enum ckpt_status { CKPT_CATEGORIES(CKPT__STATUS_ENUM) } ckpt_status;
typedef enum ckpt_detail { CKPT_DETAILS(CKPT__DETAIL_ENUM) } ckpt_detail;
#undef CKPT__STATUS_ENUM
#undef CKPT__DETAIL_ENUM

/* The identifier of a status as a string, e.g. "CKPT_E_CORRUPT";
 * "CKPT_E_UNKNOWN_STATUS" for a number that is not a status. */
CKPT_API const char *ckpt_status_name(ckpt_status status);

/* A one-line, lower-case description of a status, e.g. "the file breaks
 * its format's rules". */
CKPT_API const char *ckpt_status_message(ckpt_status status);

/* The identifier of a detail as a string, e.g. "CKPT_D_DATA_HOLE";
 * "CKPT_D_UNKNOWN_DETAIL" for a number that is not a detail. */
CKPT_API const char *ckpt_detail_name(ckpt_detail detail);

/* A one-line, lower-case description of a detail, e.g. "bytes between
 * tensors belong to no tensor". */
CKPT_API const char *ckpt_detail_message(ckpt_detail detail);

/* The category a detail belongs to (CKPT_D_DATA_HOLE: CKPT_E_CORRUPT);
 * CKPT_OK for CKPT_D_NONE and for a number that is not a detail. */
CKPT_API ckpt_status ckpt_detail_status(ckpt_detail detail);

/*
 * Details of the last failure of a call, filled only when the caller passes
 * one.  Fields that do not apply are empty strings, offset -1 and detail
 * CKPT_D_NONE.
 *   status   the category the call returned
 *   detail   the rule that broke, where the category does not say it
 *   path     the file concerned
 *   tensor   the tensor concerned
 *   offset   the byte offset in `path` where the problem lies
 *   sys_errno errno of a failed system call, else 0
 *   message  a full sentence naming all of the above and what was expected
 * Strings are truncated to fit; they are always NUL-terminated.
 */
typedef struct ckpt_error {
    ckpt_status status;
    ckpt_detail detail;
    int sys_errno;
    int64_t offset;
    char path[1024];
    char tensor[512];
    char message[2048];
} ckpt_error;

/* Resets an error to "no error" (status CKPT_OK, detail CKPT_D_NONE, empty
 * strings, offset -1). */
CKPT_API void ckpt_error_clear(ckpt_error *err);

/* ------------------------------------------------------------------------ */
/* Dtypes                                                                   */
/* ------------------------------------------------------------------------ */

/*
 * Element types.  Their order is safetensors' Dtype order (ascending
 * alignment), which its writer sorts by, descending; the numbers are stable.
 */
typedef enum ckpt_dtype {
    CKPT_DTYPE_INVALID = 0,
    CKPT_BOOL = 1,
    CKPT_F4 = 2,          /* float4 e2m1, two per byte                    */
    CKPT_F6_E2M3 = 3,     /* float6, packed                                */
    CKPT_F6_E3M2 = 4,
    CKPT_U8 = 5,
    CKPT_I8 = 6,
    CKPT_F8_E5M2 = 7,
    CKPT_F8_E4M3 = 8,     /* torch.float8_e4m3fn                           */
    CKPT_F8_E8M0 = 9,     /* torch.float8_e8m0fnu                          */
    CKPT_F8_E4M3FNUZ = 10,
    CKPT_F8_E5M2FNUZ = 11,
    CKPT_I16 = 12,
    CKPT_U16 = 13,
    CKPT_F16 = 14,
    CKPT_BF16 = 15,
    CKPT_I32 = 16,
    CKPT_U32 = 17,
    CKPT_F32 = 18,
    CKPT_C64 = 19,        /* complex64: two float32                        */
    CKPT_F64 = 20,
    CKPT_I64 = 21,
    CKPT_U64 = 22,
    /* ggml's block-quantized types (GGUF).  Elements come in blocks along
     * the innermost axis: a row is a whole number of blocks, and each block
     * of ckpt_dtype_block_elems() elements takes ckpt_dtype_block_bytes()
     * bytes.  ckpt_dtype_bits() is 0 for them. */
    CKPT_Q4_0 = 23,
    CKPT_Q4_1 = 24,
    CKPT_Q5_0 = 25,
    CKPT_Q5_1 = 26,
    CKPT_Q8_0 = 27,
    CKPT_Q8_1 = 28,
    CKPT_Q2_K = 29,
    CKPT_Q3_K = 30,
    CKPT_Q4_K = 31,
    CKPT_Q5_K = 32,
    CKPT_Q6_K = 33,
    CKPT_Q8_K = 34,
    CKPT_IQ2_XXS = 35,
    CKPT_IQ2_XS = 36,
    CKPT_IQ3_XXS = 37,
    CKPT_IQ1_S = 38,
    CKPT_IQ4_NL = 39,
    CKPT_IQ3_S = 40,
    CKPT_IQ2_S = 41,
    CKPT_IQ4_XS = 42,
    CKPT_IQ1_M = 43,
    CKPT_TQ1_0 = 44,
    CKPT_TQ2_0 = 45,
    CKPT_MXFP4 = 46,
    CKPT_NVFP4 = 47,
    CKPT_Q1_0 = 48
} ckpt_dtype;

#define CKPT_DTYPE_COUNT 49

/* The safetensors name of a dtype ("BF16", "F8_E4M3", ...); NULL if invalid. */
CKPT_API const char *ckpt_dtype_name(ckpt_dtype dtype);

/* The dtype with this safetensors name (exact, case-sensitive), or
 * CKPT_DTYPE_INVALID. */
CKPT_API ckpt_dtype ckpt_dtype_from_name(const char *name);

/* Bits per element (4 for F4, 6 for F6_*, 8 for U8, 64 for C64, ...); 0 if
 * invalid.  A tensor's size in bytes is elements × bits / 8, which must be a
 * whole number. */
CKPT_API unsigned ckpt_dtype_bits(ckpt_dtype dtype);

/* Non-zero for ggml's block-quantized dtypes (CKPT_Q4_0 ... CKPT_Q1_0). */
CKPT_API int ckpt_dtype_is_block(ckpt_dtype dtype);

/* Elements per unit and bytes per unit: a block's (Q4_0: 32 elements in 18
 * bytes) for block dtypes, 1 and the element's size for byte-sized dtypes,
 * 2 and 1 for F4, 4 and 3 for F6; 0 if invalid.  A tensor of a block dtype
 * has an innermost dimension that is a multiple of the block's elements. */
CKPT_API uint32_t ckpt_dtype_block_elems(ckpt_dtype dtype);
CKPT_API uint32_t ckpt_dtype_block_bytes(ckpt_dtype dtype);

/* ------------------------------------------------------------------------ */
/* Catalog: what a checkpoint holds, without its data                       */
/* ------------------------------------------------------------------------ */

typedef struct ckpt_catalog ckpt_catalog;

typedef enum ckpt_format {
    CKPT_FORMAT_SAFETENSORS = 1,         /* one .safetensors file          */
    CKPT_FORMAT_SAFETENSORS_SHARDED = 2, /* index.json + shards            */
    CKPT_FORMAT_TORCH = 3,               /* one torch.save zip file        */
    CKPT_FORMAT_TORCH_SHARDED = 4,       /* pytorch_model.bin.index.json + shards */
    CKPT_FORMAT_GGUF = 5,                /* a .gguf file, or gguf-split parts  */
    /* A torch.distributed.checkpoint directory: .metadata and the ranks'
     * __<rank>_<n>.distcp files, or the per-rank safetensors files of its
     * Hugging Face storage layer (DCP_SHARDING_INFO). */
    CKPT_FORMAT_DCP = 6,
    CKPT_FORMAT_NPY = 7,                 /* one NumPy .npy array           */
    CKPT_FORMAT_NPZ = 8,                 /* a NumPy .npz archive of arrays */
    CKPT_FORMAT_FLAX_MSGPACK = 9         /* flax.serialization msgpack (flax_model.msgpack) */
} ckpt_format;

/* The format's short name ("safetensors", "safetensors-sharded", "torch",
 * "torch-sharded", ...), or NULL for a number that is not a format. */
CKPT_API const char *ckpt_format_name(ckpt_format format);

/* The formats ckpt reads, for help texts and errors: the i-th (i from 0,
 * in the order help texts list them), or 0 past the last.  The list comes
 * from the library's registry of readers: a program that lists formats
 * through it lists a new one without a change. */
CKPT_API ckpt_format ckpt_format_at(size_t i);

/* A line for people about a format: what it is and which files, e.g.
 * "GGUF: a .gguf file, or the first of gguf-split's *-00001-of-0000N.gguf";
 * NULL for a number that is not a format. */
CKPT_API const char *ckpt_format_description(ckpt_format format);

/* Non-zero when ckpt also writes the format (ckpt_writer_options.format,
 * `ckpt convert`); sharded safetensors are written as safetensors with a
 * max_shard_size. */
CKPT_API int ckpt_format_writable(ckpt_format format);
/* The format a short name names, as ckpt_format_name spells it ("gguf",
 * "flax-msgpack"; ASCII case ignored), or 0. */
CKPT_API ckpt_format ckpt_format_from_name(const char *name);

/*
 * The format ckpt writes for a file name's suffix (ASCII case ignored), or
 * 0 when the suffix names none:
 *   .safetensors  CKPT_FORMAT_SAFETENSORS     .npy      CKPT_FORMAT_NPY
 *   .gguf         CKPT_FORMAT_GGUF            .npz      CKPT_FORMAT_NPZ
 *   .pt .pth .bin CKPT_FORMAT_TORCH           .msgpack  CKPT_FORMAT_FLAX_MSGPACK
 * Only the name is looked at.
 */
CKPT_API ckpt_format ckpt_format_for_path(const char *path);

#define CKPT_MAX_DIMS 64

/* One tensor of a catalog.  All pointers live as long as the catalog. */
typedef struct ckpt_tensor_info {
    const char *name;        /* UTF-8, NUL-terminated                      */
    ckpt_dtype dtype;
    uint32_t ndim;           /* 0 for a scalar                              */
    const uint64_t *shape;   /* ndim sizes, outermost first                 */
    uint64_t numel;          /* product of the shape (1 for a scalar)       */
    uint64_t nbytes;         /* size of the data in bytes                   */
    uint32_t file;           /* index of its file, see ckpt_catalog_file_path */
    uint64_t offset;         /* absolute byte offset of the data (of element 0) in that file */
    /* Element strides when the data is not dense row-major (a torch view
     * such as a transpose), else NULL.  Reads gather such tensors into
     * dense row-major order. */
    const int64_t *strides;
    /* Tensors that share bytes (torch tensors on one storage) have the same
     * storage number; in safetensors every tensor has its own. */
    uint32_t storage;
    /* Non-zero when the file stores the data big-endian (torch files saved
     * on big-endian machines); reads return little-endian data. */
    uint8_t big_endian;
    /* Non-zero when the data sits in a compressed (DEFLATE) zip record
     * (a re-zipped torch file, an np.savez_compressed member) or is
     * assembled from several chunks (a large array of a Flax msgpack
     * file): reads inflate or gather it, a view is refused, and `offset`
     * is not a place in the file. */
    uint8_t compressed;
} ckpt_tensor_info;

/*
 * Opens a checkpoint and reads its metadata (never its tensor data).
 *
 * `path` names a file, a directory or a URL; a file's format is told by
 * its first bytes and, where they say little, its name.  Every format ckpt
 * reads (src/formats/registry.c):
 *   - safetensors: a `.safetensors` file, or a `*.safetensors.index.json`
 *     index (Hugging Face shards, opened from the index's directory);
 *   - PyTorch torch.save files, without executing their pickles: the zip
 *     format (`pytorch_model.bin`, `*.pt`, `*.pth`, re-zipped DEFLATE
 *     archives too), the legacy pre-1.6 stream format, and sharded
 *     `pytorch_model.bin.index.json` (any `*.json` index with a
 *     "weight_map": its shards may be in any format here).  The tar format
 *     of PyTorch before 0.4 is recognised and refused
 *     (CKPT_E_UNKNOWN_FORMAT, saying so);
 *   - GGUF: a `.gguf` file, or the first of gguf-split's parts
 *     (`*-00001-of-0000N.gguf`), whose other parts are opened beside it;
 *   - torch.distributed.checkpoint (DCP): its directory, or its `.metadata`
 *     file, whose `__<rank>_<n>.distcp` files are opened beside it (one
 *     `.distcp` file alone is refused: it means nothing without
 *     `.metadata`); and the per-rank safetensors files of DCP's Hugging Face
 *     storage layer (DCP_SHARDING_INFO in their metadata): opening one, or
 *     their directory, opens every `*.safetensors` file beside it;
 *   - NumPy: a `.npy` file (one tensor, named after the file: "w.npy" →
 *     "w") or a `.npz` archive (stored or DEFLATE members, named after
 *     them);
 *   - Flax msgpack (flax.serialization.to_bytes; transformers'
 *     `flax_model.msgpack`) and its sharded `flax_model.msgpack.index.json`;
 *     tensors are named by their path, keys joined by ".";
 *   - a directory holding one of them, tried in this order: `.metadata`
 *     (DCP), `model.safetensors.index.json`, another single
 *     `*.safetensors.index.json`, `model.safetensors`, DCP's Hugging Face
 *     layer (`shard-00001-model-*.safetensors`), a single `*.safetensors`,
 *     `pytorch_model.bin.index.json`, a single `*.bin.index.json`,
 *     `pytorch_model.bin`, a single `*.bin`, a single `*.gguf` (or
 *     gguf-split parts), `flax_model.msgpack.index.json`,
 *     `flax_model.msgpack`, a single `*.msgpack`, a single `*.npz`, a
 *     single `*.npy`; several files of one kind and no index is
 *     CKPT_E_UNKNOWN_FORMAT;
 *   - `http://` and `https://` URLs of any of these files (an index's
 *     shards are fetched relative to its URL), or ending in '/' for a
 *     remote "directory", where only the exact names above are tried (a
 *     URL cannot be listed); see ckpt_catalog_options.  A build without
 *     libcurl refuses URLs with CKPT_D_UNSUPPORTED_SOURCE;
 *   - `s3://BUCKET/KEY` (S3 and S3-compatible stores), `gs://BUCKET/KEY`
 *     (Google Cloud Storage) and `az://ACCOUNT/CONTAINER/BLOB`
 *     or `https://ACCOUNT.blob.core.windows.net/CONTAINER/BLOB` (Azure Blob
 *     Storage) names of any of these files, or of a prefix (a "directory",
 *     with or without its final '/'), which is listed as a local directory
 *     is; their credentials: ckpt_catalog_options;
 *   - `hf://ORG/NAME[@REVISION][/PATH]`: a repo of the Hugging Face Hub, a
 *     folder of it or one file, which opens as a local directory does (the
 *     repo is listed by the Hub's API).  It is resolved as huggingface_hub
 *     resolves it: the Hub is $HF_ENDPOINT (https://huggingface.co); the
 *     revision (a branch, tag or commit; "main" by default; a '/' in it
 *     written %2F) is pinned to its commit once, by the API, and every
 *     file is read at that commit (the files' names say it:
 *     hf://org/name@COMMIT/file), so a branch that moves meanwhile cannot
 *     mix versions; files come from GET resolve/COMMIT/PATH (redirected
 *     to the Hub's CDN) with the machinery of URLs above.  Credentials:
 *     `bearer_token`, else $HF_TOKEN, else the token `hf auth login`
 *     saved ($HF_TOKEN_PATH, else $HF_HOME/token, else
 *     ~/.cache/huggingface/token), sent to the endpoint's host only; a
 *     gated repo is CKPT_D_HTTP_AUTH saying to accept its terms at its
 *     page and to set HF_TOKEN, a private or missing one CKPT_D_HTTP_AUTH
 *     (or CKPT_E_NOT_FOUND) saying to set HF_TOKEN.  The Hub's own cache
 *     is used as huggingface_hub uses it — hf_cache_dir of
 *     ckpt_catalog_options, else $HF_HUB_CACHE, else $HF_HOME/hub, else
 *     ~/.cache/huggingface/hub:
 *     models--ORG--NAME/blobs/ETAG, snapshots/COMMIT/PATH relative links
 *     to them, refs/BRANCH, and flock'ed .locks/models--ORG--NAME/ETAG.lock
 *     — so that each finds what the other downloaded: a file of the
 *     commit's snapshot is read with no request; any other is opened with
 *     one ranged GET of its first 16 KiB (`ckpt inspect` of a sharded
 *     model reads a few tens of KB per shard), and the first read of its
 *     tensor data downloads it whole into the cache (resuming a
 *     blobs/ETAG.incomplete that a cut download left), hashed with SHA-256
 *     as it streams and compared with the Hub's (X-Linked-Etag, the API's
 *     lfs.sha256): a mismatch is CKPT_E_CHECKSUM naming the file and the
 *     commit, and keeps nothing.  Files of up to 16 KiB (configs,
 *     indexes) go into the cache as they are opened.  Opening an hf:// name
 *     thus writes into the Hub's cache — the one exception to "a read
 *     never writes", as huggingface_hub itself does.  $HF_HUB_OFFLINE=1
 *     sends no request: a branch is read from refs/, files from the
 *     snapshot, and what is missing is CKPT_E_NOT_FOUND naming
 *     HF_HUB_OFFLINE.  ckpt_verify checks each LFS file against the Hub's
 *     SHA-256 (report->file_sha256).
 *
 * A file that no reader takes and that cannot be a damaged safetensors file
 * (text, HTML, JSON that is no index, a ZIP archive that is not torch's,
 * gzip-compressed data, binary data whose first 8 bytes are no header
 * length…) fails with CKPT_E_UNKNOWN_FORMAT: "not a checkpoint ckpt reads
 * (it looks like HTML, a web page); ckpt reads safetensors, …" — for a URL
 * that answered with a web page, with its directory form (a trailing '/')
 * to try.  See ckpt_detect_format and docs/FORMATS.md.
 *
 * Every validation rule of huggingface/safetensors is applied to every file,
 * plus duplicate-name detection; for an index, every tensor of the
 * weight_map must be in its shard and every tensor of a shard in the
 * weight_map.  Shard file names may not be absolute or contain ".."
 * (CKPT_D_INDEX_INVALID; a DCP relative_path: CKPT_D_DCP_PATH).
 *
 * Files inside a checkpoint directory (docs/SECURITY.md).  `path` itself is
 * followed as given: it may be, or pass through, a symbolic link.  Every
 * other local file — an index's shards, gguf-split's later parts, DCP's
 * .distcp files and .metadata, the files of DCP's Hugging Face layer, the
 * file a directory resolves to — is opened relative to the checkpoint's
 * directory (`path`, or the directory holding it), never by a path string:
 *   - a symbolic link inside the directory is followed; one that leads out
 *     of it (an absolute target, or ".." above it) is refused with
 *     CKPT_E_UNSAFE_PATH naming the file and the link's target
 *     (openat2 with RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS on Linux ≥ 5.6,
 *     else the same rule walked component by component with O_NOFOLLOW);
 *   - a FIFO, socket, device node or directory in place of a file is
 *     refused with CKPT_E_UNSAFE_PATH at once, without being opened;
 *   - hard links are regular files and are read;
 *   - the Hugging Face cache: when the directory is (in) a snapshot,
 *     `<cache>/models--org--name/snapshots/<rev>/`, whose files are links
 *     to `../../blobs/<hash>`, links to exactly the repo folder's blobs/
 *     are followed there (and from a blob huggingface_hub moved into the
 *     cache's shared store, `<cache>/blobs/<xx>/<hash>`, to that file), no
 *     other link out.
 * CKPT_NO_OPENAT2=1 in the environment forces the component walk (tests).
 *
 * Opening is safe on a thread with a small stack (64 KiB): nesting in the
 * files (object trees, msgpack, JSON, GGUF arrays, DCP metadata) is followed
 * on the heap, never by recursion; the depth limits (500 for a torch object
 * tree, 256 for msgpack, 128 for JSON, 64 for DCP .metadata, 16 for GGUF
 * arrays) are refused with CKPT_E_LIMIT.  What the files' metadata takes in
 * memory (values, strings, object trees) is bounded by 8 times the bytes of
 * the files opened plus 64 MiB (a DCP directory's data files count before
 * its .metadata is read; a remote one's cannot be listed); beyond it the
 * open fails with CKPT_E_LIMIT naming the file and the byte offset where
 * the bound was crossed.
 *
 * Tensors are listed shard by shard, in the order of their data in the file.
 * On success *out receives the catalog; on failure *out is NULL.
 *
 * An open never writes: it never creates, changes, renames or removes
 * anything, anywhere — not even to finish a commit a crash cut short.
 * When the checkpoint's directory holds the journal of such a commit
 * (`.ckpt-commit.json`, see ckpt_commit_recover) that recovery would
 * execute, and it concerns what is opened (any such journal, for a
 * directory; one naming the file, for a file), the open fails with
 * CKPT_E_INCOMPLETE naming the directory and the fix: ckpt_commit_recover
 * (`ckpt recover DIR`, Python's ckpt.recover), or any write into the
 * directory; while a live writer holds the directory, it names that
 * process instead.  A journal that is not provably ckpt's (planted or
 * damaged) is ignored.  Why reads leave recovery to writers and to an
 * explicit call: a live writer may be between its journal and its last
 * rename (a reader finishing "its" commit would race with it); a reader
 * may be on a read-only mount or in a shared directory it may not write;
 * and a directory from elsewhere may carry a journal made to damage files
 * (SQLite, likewise, replays a hot journal only when it is provably its
 * own).
 */
CKPT_API ckpt_status ckpt_catalog_open(const char *path, ckpt_catalog **out, ckpt_error *err);

/*
 * How a catalog reads its local files (ckpt_catalog_options.io).  It is
 * the catalog's, not a load's, because it decides how the files are opened.
 *   CKPT_IO_AUTO      the default: through the page cache, views (mappings)
 *                     where a load asks for them; a load reads a local file
 *                     of 64 MiB or more, mostly not cached, with O_DIRECT.
 *   CKPT_IO_BUFFERED  always through the page cache.
 *   CKPT_IO_DIRECT    around the page cache, for machines where it hurts
 *                     (network mounts, unified memory, containers whose
 *                     page cache counts against their memory limit): every
 *                     read uses O_DIRECT (or, where the file system has
 *                     none, drops its pages after use); converts drop what
 *                     they wrote once it is on disk; no mappings, so a load
 *                     asking for views reads every tensor into memory.
 */
typedef enum ckpt_io_mode { CKPT_IO_AUTO = 0, CKPT_IO_BUFFERED = 1, CKPT_IO_DIRECT = 2 } ckpt_io_mode;


/*
 * What ckpt_catalog_open_ex may be told.  Initialise with
 * ckpt_catalog_options_init, which sets `size` to the caller's sizeof: a
 * later library, whose options are longer, then knows which fields the
 * caller has (every option struct of this header works so).
 */
typedef struct ckpt_catalog_options {
    size_t size; /* sizeof(ckpt_catalog_options), set by ckpt_catalog_options_init */
    /*
     * Pickle globals ("module.Name") allowed beside torch's weights-only
     * allowlist, like torch.serialization.add_safe_globals, for training
     * checkpoints that hold numpy scalars, argparse namespaces or
     * dataclasses.  Nothing is ever executed: an allowed global may only
     * be a plain-data reconstructor or a class whose instances are rebuilt
     * from their state (NEWOBJ + BUILD); it is kept in the object tree as
     * {"__call__": "module.Name", "args": [...], "state": ...}.
     */
    const char *const *allowed_globals;
    size_t allowed_global_count;

    /* ---- remote files: http://, https://, s3://, gs:// and az:// names ---
     * A URL opens like a path: a single file, an index whose shards lie
     * beside it (resolved relative to the index's URL), a torch.save file,
     * or — ending in '/' — a "directory" in which the names a local
     * directory is searched for are tried one by one (nothing is listed).
     * Opening reads headers only, with ranged GETs (one for a safetensors
     * file whose header fits in 256 KiB, two otherwise; a server that
     * serves no ranges: see download_progress below).  Loads and reads
     * send parallel range requests (adjacent ranges merged), writing the
     * bytes straight into their destinations; every response is checked
     * against the request (status, Content-Range, length) and against the
     * file as it was opened (ETag, Last-Modified, size: sent as If-Range,
     * or If-Match to S3), so that a file replaced mid-load fails with
     * CKPT_D_REMOTE_CHANGED instead of mixing versions.
     * Credentials: `bearer_token` below; else, for huggingface.co and
     * hf.co, $HF_TOKEN; ~/.netrc; a user part in the URL, "user:password@"
     * or a bare "TOKEN@" (sent to that host only, and kept out of every name,
     * error and cache file name: see ckpt_redact_name).  s3:// names use
     * $AWS_ACCESS_KEY_ID, $AWS_SECRET_ACCESS_KEY, $AWS_SESSION_TOKEN (no
     * keys: anonymous requests), $AWS_REGION (or $AWS_DEFAULT_REGION,
     * default us-east-1) and $AWS_ENDPOINT_URL_S3 / $AWS_ENDPOINT_URL for
     * S3-compatible stores (path-style requests), signed with SigV4.
     * gs:// names (the XML API of storage.googleapis.com, or
     * $STORAGE_EMULATOR_HOST) use HMAC keys, $GS_ACCESS_KEY_ID and
     * $GS_SECRET_ACCESS_KEY (V4 signatures, GOOG4-HMAC-SHA256), else an
     * OAuth token of Application Default Credentials — the key file
     * $GOOGLE_APPLICATION_CREDENTIALS names (a service account's: a JWT
     * signed RS256 with its key and exchanged at its token_uri; or an
     * authorized user's refresh token), gcloud's
     * application_default_credentials.json, or the metadata server
     * ($GCE_METADATA_HOST, or on a Google Cloud machine) — else none
     * (public buckets).  Azure names use a SAS token (the URL's query,
     * $AZURE_STORAGE_SAS_TOKEN, or a connection string's), else the
     * account key (SharedKey: $AZURE_STORAGE_ACCOUNT and $AZURE_STORAGE_KEY,
     * or $AZURE_STORAGE_CONNECTION_STRING's AccountName and AccountKey, and
     * its BlobEndpoint for Azurite; $AZURE_STORAGE_SERVICE_ENDPOINT beside
     * the two variables), else none (public containers).  The
     * stores' requests follow no redirect, so credentials reach the
     * store's host only; their errors carry the store's code and message
     * (403: CKPT_E_AUTH, 404: CKPT_E_NOT_FOUND).
     * libcurl honours $https_proxy, $http_proxy and $no_proxy; servers'
     * certificates are checked against the system's, or those of the file
     * $CURL_CA_BUNDLE names. */
    uint32_t connect_timeout_ms; /* to establish a connection; 0: 30 s                        */
    uint32_t read_timeout_ms;    /* a transfer that receives nothing for this long fails (and is
                                    retried); counted in whole seconds; 0: 60 s                */
    /* Attempts after the first for a request that failed in a way worth
     * retrying (HTTP 408, 429, 5xx, a connection refused or reset, a short
     * body, a timeout), each resuming at the last byte received, after
     * 0.2 s doubling up to 10 s (or the server's Retry-After, up to 60 s).
     * ckpt_catalog_options_init sets 5; 0 never retries.  However many,
     * they stop at retry_deadline_ms (below). */
    uint32_t retries;
    uint32_t max_connections;    /* parallel range requests per file; 0: 16                     */
    const char *bearer_token;    /* sent as "Authorization: Bearer …" to the URL's host (never to
                                    a host a redirect leads to); NULL: see above              */
    /* A directory for verified copies of remote files, named by a hash of
     * the URL, its ETag (or Last-Modified) and size: a file read whole
     * (by a load or a convert) is written there as it arrives and renamed
     * into place once complete; a later open of the same version reads
     * the local copy (after one request to check the version).  A file the
     * first answer brings whole (256 KiB or less) is not copied: that
     * request brings it anyway.  NULL: no cache.
     * The directory (and any parent it lacks) is created 0700 and every
     * file in it 0600, whatever the umask allows beyond that: copies may
     * come from behind credentials.  An existing directory is used as it is
     * (its mode is the user's choice; its new files are still 0600) if this
     * user owns it; one owned by another user is not used at all.
     * A copy is trusted only when it is a regular file of this user with
     * one link, of the size the server gives, unchanged since ckpt
     * renamed it into place (inode, size, modification and change times
     * recorded beside it, in "<hash>.stamp"), and — when the server gives
     * the file's SHA-256 (the Hugging Face Hub's X-Linked-Etag, or an ETag
     * of 64 hex digits) — with that SHA-256 (checked before the copy is
     * renamed into place, and again if the record does not match).
     * Anything else (a symlink, a FIFO, a hard link, another user's file, a
     * copy cut short or altered) is never opened for reading through, nor
     * written through: the file is read remotely and its new copy replaces
     * the name (a temporary, then rename). */
    const char *cache_dir;

    /* How local files are read by every load, conversion and verification
     * of the catalog: the one direct-I/O knob (see ckpt_io_mode). */
    ckpt_io_mode io;

    /* ---- remote files: how slow is too slow -------------------------------
     * read_timeout_ms fails a transfer that receives nothing; a server
     * that trickles a few bytes a second passes it forever.  So an attempt
     * that receives fewer than min_speed_bytes per second, averaged over
     * each min_speed_time_ms from its answer's first header line, fails
     * with CKPT_E_TIMEOUT (naming the URL and the byte reached) and is
     * retried like any timeout.  ckpt_catalog_options_init sets 1024 bytes
     * per second over 30 s: a link that slow needs 12 days for a 1 GB
     * shard, so no honest download is cut (a mobile link at its worst
     * still moves tens of KiB/s, and a pause of up to 30 s is averaged
     * away), while a stalled or hostile server is dropped within half a
     * minute.  0 turns the minimum off. */
    uint32_t min_speed_bytes;
    uint32_t min_speed_time_ms; /* 0: 30 s */
    /* Retries, bounded in time.  A request (a byte range, all its attempts
     * and the waits between them) that has gone retry_deadline_ms without
     * an attempt that received bytes at min_speed_bytes or faster is not
     * retried again: its next failure is final.  So a server that sends
     * nothing, or too little, holds a request at most retry_deadline_ms
     * plus one attempt (connect_timeout_ms, then the longer of
     * read_timeout_ms and min_speed_time_ms), however many `retries` are
     * allowed; with the defaults, a little over 6 minutes.  An attempt
     * that keeps up the minimum speed is never cut by it (a slow but
     * honest link finishes).  ckpt_catalog_options_init sets 300 s; 0:
     * retries are bounded by their number only. */
    uint32_t retry_deadline_ms;

    /* ---- remote files: servers without byte ranges ------------------------
     * A server that answers a range request with the whole file (HTTP 200:
     * `python -m http.server`, many mirrors) cannot serve a file over
     * 256 KiB in parts.  Without cache_dir, opening such a file fails with
     * CKPT_D_NO_RANGES, naming the URL and how to give a cache directory.
     * With cache_dir, the open keeps the first 256 KiB of that answer (a
     * safetensors header: listing the tensors reads no more) and the first
     * read past them downloads the file whole, once, into the cache
     * directory by the rules of any copy there: streamed to a 0600
     * temporary created with O_EXCL (never held in memory), its size
     * checked against the server's Content-Length, its SHA-256 where the
     * server states one, then renamed into place (without an ETag or
     * Last-Modified to name its version, it stays a temporary, removed when
     * the catalog closes); every read then comes from it.  A download that
     * fails or is cut leaves nothing under the copy's name.  The download
     * keeps the minimum speed and the retry deadline above; a retry
     * resumes where the server answers it with a range, and starts over
     * where it sends the whole file again.  Each file of a checkpoint (an
     * index's shards) falls back on its own.
     * download_progress, when not NULL, hears these downloads: the bytes
     * received so far and the sum of the sizes of the catalog's downloads
     * begun (a download that starts over takes its bytes back), at a
     * download's start and end and about every 100 ms between, one call at
     * a time but from whichever thread reads (an engine thread during a
     * load or a convert).  Non-zero stops every download of the catalog
     * (CKPT_E_CANCELLED). */
    int (*download_progress)(uint64_t done, uint64_t total, void *user);
    void *download_progress_user;

    /* The Hugging Face Hub's cache that hf:// names use, in huggingface_hub's
     * layout (see ckpt_catalog_open), as huggingface_hub's and transformers'
     * `cache_dir=` names it.  NULL: $HF_HUB_CACHE, else $HF_HOME/hub, else
     * ~/.cache/huggingface/hub.  Other names never use it. */
    const char *hf_cache_dir;
} ckpt_catalog_options;

/* Fills the first `size` bytes of options with the defaults, and `size`
 * with `size`: the caller's sizeof, so that a library newer than the
 * caller's header writes only the fields the caller has. */
CKPT_API void ckpt_catalog_options_init_sized(ckpt_catalog_options *options, size_t size);
static inline void ckpt_catalog_options_init(ckpt_catalog_options *options) {
    ckpt_catalog_options_init_sized(options, sizeof *options);
}

/*
 * Which format ckpt_catalog_open reads the file `path` as (a local file or
 * a URL, not a directory), from its first bytes and its name alone: a
 * torch.save file damaged further on is still CKPT_FORMAT_TORCH, so that a
 * front end can name the family of an error (Python's TorchError, GGUFError
 * …).  An index of shards gives the shards' usual format (by its name:
 * *.safetensors.index.json, *.msgpack.index.json, else torch).  A file
 * that is no checkpoint ckpt reads fails with CKPT_E_UNKNOWN_FORMAT saying
 * what it looks like (text, HTML, JSON, a ZIP archive that is not torch's,
 * gzip-compressed data, …) and which formats ckpt reads — the error
 * ckpt_catalog_open gives for it.  Reads at most 512 bytes; `options` may
 * be NULL.
 */
CKPT_API ckpt_status ckpt_detect_format(const char *path, const ckpt_catalog_options *options, ckpt_format *format,
                                        ckpt_error *err);

/* ckpt_catalog_open with options (NULL: the defaults). */
CKPT_API ckpt_status ckpt_catalog_open_ex(const char *path, const ckpt_catalog_options *options, ckpt_catalog **out,
                                          ckpt_error *err);

/* ==== Sources: a checkpoint read through the caller's functions =========
 *
 * A source is where a checkpoint's bytes come from.  The library has its own
 * (local files, http(s)://, s3://, gs://, az://, hf://, memory); a caller with another store (an
 * object store ckpt has no client for, an archive, an encrypted volume, a
 * test that injects faults) gives a table of functions instead, as SQLite's
 * VFS does (sqlite3_vfs and sqlite3_io_methods: iVersion, xOpen, xRead,
 * xFileSize, …), and opens the checkpoint with ckpt_catalog_open_source.
 * The library's own sources implement the same table (src/io/).
 *
 * Names.  A source's names are '/'-separated paths in its own namespace,
 * starting with the name given to ckpt_catalog_open_source.  That name is a
 * file (a checkpoint file: safetensors, torch, GGUF, …, or a shards index)
 * or a directory; the files a checkpoint names (an index's shards, a DCP
 * directory's .distcp files, gguf-split parts) are that name's directory
 * joined with a file name.  The library never asks for a name outside the
 * opened directory.
 *
 * Every function receives `user`, the pointer given to
 * ckpt_catalog_open_source, and fails by returning a status other than
 * CKPT_OK; where it gets `err` (never NULL, cleared), it may write why in
 * err->message.  The library's error then names the file, the byte offset
 * and the tensor, and quotes that message.  A file's functions may be
 * called from several threads at once (loads read on threads); `open`,
 * `stat` and `list` are called from the opening thread.
 */

/* The version of ckpt_source_ops this header describes.  A table's
 * `version` says which fields it has: a later version only adds fields at
 * the end, and the library reads no field beyond the table's version. */
#define CKPT_SOURCE_OPS_VERSION 1

/* What a name is. */
typedef enum ckpt_source_kind {
    CKPT_SOURCE_MISSING = 0,   /* nothing by that name                          */
    CKPT_SOURCE_FILE = 1,      /* a file: bytes that `open` gives               */
    CKPT_SOURCE_DIRECTORY = 2  /* a directory: names that `list` gives          */
} ckpt_source_kind;

/* What `stat` tells of a name.  Validators say whether a file changed
 * between two opens (0 and NULL: none known). */
typedef struct ckpt_source_stat {
    ckpt_source_kind kind;
    uint64_t size;        /* a file's bytes                                      */
    int64_t mtime_ns;     /* its last change, nanoseconds since 1970 (0: unknown) */
    const char *etag;     /* an opaque version tag (an HTTP ETag), or NULL; it must
                             stay valid until the next call on the source        */
} ckpt_source_stat;

/* One read of a batch (ckpt_source_ops.read_many): `len` bytes at `offset`
 * into `dst`, of which at least `need` must exist (the rest may lie past
 * the end of the file, which then leaves them unwritten). */
typedef struct ckpt_source_request {
    void *dst;
    uint64_t offset, len, need;
    const char *tensor; /* the tensor the bytes are for (for messages), or NULL */
} ckpt_source_request;

typedef struct ckpt_source_ops {
    /* CKPT_SOURCE_OPS_VERSION when the table was written. */
    int version;
    /* Opens the file `name` for reading: its handle in *file (any pointer,
     * given back to read, read_many, map, unmap and close) and its size in
     * *size.  A directory or a missing name fails (CKPT_E_NOT_FOUND). */
    ckpt_status (*open)(void *user, const char *name, void **file, uint64_t *size, ckpt_error *err);
    /* Reads exactly `n` bytes at `offset` of an opened file into `dst`.  A
     * file that ends first fails with CKPT_E_TRUNCATED. */
    ckpt_status (*read)(void *user, void *file, void *dst, uint64_t n, uint64_t offset, ckpt_error *err);
    /* Optional (NULL: one `read` after another): performs `n` reads of one
     * file, in any order or at once — what a remote store gains most from. */
    ckpt_status (*read_many)(void *user, void *file, ckpt_source_request *reqs, size_t n, ckpt_error *err);
    /* Optional (NULL: the file is read, never mapped): the file's bytes in
     * memory, [0, size), for zero-copy views (ckpt_catalog_view); they must
     * stay unchanged and readable until unmap.  `writable` (a private
     * copy-on-write mapping) is asked only of the library's own local
     * files: a caller's table is always asked with 0. */
    ckpt_status (*map)(void *user, void *file, int writable, void **base, ckpt_error *err);
    void (*unmap)(void *user, void *file, void *base);
    /* What `name` is (a file or a directory) and, for a file, its size and
     * validators.  A missing name is CKPT_OK with kind CKPT_SOURCE_MISSING;
     * a failure to find out is an error.  Required by
     * ckpt_catalog_open_source, like open and read. */
    ckpt_status (*stat)(void *user, const char *name, ckpt_source_stat *out, ckpt_error *err);
    /* Optional (NULL: directories cannot be listed, and only exact names
     * are looked for in them): calls `add` with each name directly in the
     * directory `dir` — plain names, no '/', in any order; subdirectories
     * may be given (opening them fails).  A nonzero return of `add` (out of
     * memory) asks to stop: return what it returned. */
    ckpt_status (*list)(void *user, const char *dir, int (*add)(void *ctx, const char *name), void *ctx,
                        ckpt_error *err);
    /* Releases an opened file. */
    void (*close)(void *user, void *file);
} ckpt_source_ops;

/*
 * Opens the checkpoint `name` of the source `ops` (with `user`) as
 * ckpt_catalog_open_ex opens a path: a checkpoint file, a shards index, or
 * a directory (found by the same rules: model.safetensors.index.json,
 * model.safetensors, a DCP .metadata, … — those that need a listing only
 * where `list` is given).  `ops` and `user` must outlive the catalog.
 * `options` may be NULL; its remote and direct I/O fields do not apply.
 *
 * What the source says is checked as a file's bytes are: a name `list`
 * gives with '/', or that is "." or "..", and a size smaller than the data
 * a file declares, fail the open (CKPT_E_UNSAFE_PATH, CKPT_E_TRUNCATED)
 * naming the name and the offset; a failed read fails with the source's
 * status, naming the file, the tensor and the byte offset.
 */
CKPT_API ckpt_status ckpt_catalog_open_source(const ckpt_source_ops *ops, void *user, const char *name,
                                              const ckpt_catalog_options *options, ckpt_catalog **out,
                                              ckpt_error *err);

/*
 * The library's source of one file held in memory: `user` must point to a
 * ckpt_memory_source, which, like its bytes, must outlive the catalog.
 * Views of the catalog's tensors point into `data` (no copy).
 */
typedef struct ckpt_memory_source {
    const void *data;
    uint64_t size;
} ckpt_memory_source;
CKPT_API extern const ckpt_source_ops ckpt_memory_source_ops;

/* ==== end of sources ==================================================== */

/*
 * A checkpoint name as it may be shown — printed, logged, kept in an error:
 * an http(s)://, s3://, gs:// or az:// URL loses its whole user part ("user:password@"
 * and a bare token such as "ghp_…@" both become "REDACTED@") and the
 * values of query parameters that carry credentials (X-Amz-Signature,
 * X-Amz-Credential, X-Amz-Security-Token, Signature, sig, token,
 * access_token, key, …); a path comes back unchanged.  The library shows
 * names only so (ckpt_catalog_file_path, ckpt_error.path and .message),
 * and so do ckpt's CLI, its Python package and its Elixir binding.  Writes at most `cap` bytes to
 * `out` (NUL-terminated, cut short to fit; `out` may be NULL when `cap` is
 * 0) and returns the length of the whole redacted name, as snprintf does.
 */
CKPT_API size_t ckpt_redact_name(const char *name, char *out, size_t cap);

/* Releases a catalog, its files and its mappings.  Accepts NULL.  Views and
 * infos obtained from the catalog become invalid. */
CKPT_API void ckpt_catalog_close(ckpt_catalog *catalog);

/* The catalog's format. */
CKPT_API ckpt_format ckpt_catalog_format(const ckpt_catalog *catalog);

/* Number of tensors. */
CKPT_API size_t ckpt_catalog_tensor_count(const ckpt_catalog *catalog);

/* The i-th tensor (0 ≤ i < count), or NULL when out of range. */
CKPT_API const ckpt_tensor_info *ckpt_catalog_tensor(const ckpt_catalog *catalog, size_t i);

/* The tensor with this exact name, or NULL (constant time on average). */
CKPT_API const ckpt_tensor_info *ckpt_catalog_find(const ckpt_catalog *catalog, const char *name);

/* Number of data files (1 for a single file, the number of shards else). */
CKPT_API size_t ckpt_catalog_file_count(const ckpt_catalog *catalog);

/* The path of the i-th data file as opened, or NULL when out of range. */
CKPT_API const char *ckpt_catalog_file_path(const ckpt_catalog *catalog, size_t i);

/* The size in bytes of the i-th data file, or 0 when out of range. */
CKPT_API uint64_t ckpt_catalog_file_size(const ckpt_catalog *catalog, size_t i);

/* The path of the index file for a sharded checkpoint, else NULL. */
CKPT_API const char *ckpt_catalog_index_path(const ckpt_catalog *catalog);

/*
 * The object tree of a torch file (a DCP checkpoint, a Flax document) as
 * JSON: exactly the structure torch.load (dcp_to_torch_save) returns —
 * a state dict is one dict keyed "conv1.weight", which its tensors' names
 * cannot tell from nested dicts —, everything that is not a tensor (ints,
 * floats, strings, containers, optimizer hyper-parameters) included, with
 * each tensor as {"__tensor__": "<name>"}; NULL for safetensors (a
 * converted torch file's tree is in its metadata, "ckpt.torch_tree": see
 * ckpt_plan_tree_json).  Dicts are {"__dict__": [[key, value], …]} (keys
 * in order, ints kept as ints; an OrderedDict says so:
 * "__class__": "collections.OrderedDict", and has its "__state__", a
 * state dict's _metadata), tuples {"__tuple__": […]} (a torch.Size:
 * "__class__": "torch.Size"), sets
 * {"__set__": […]}, bytes {"__bytes__": "<hex>"}, other allowed objects
 * {"__call__": "module.name", "args": […]}; a sharded checkpoint gives
 * {"__shards__": [tree, …]}.
 */
CKPT_API const char *ckpt_catalog_tree_json(const ckpt_catalog *catalog);

/*
 * ---- The object tree as values ----------------------------------------------
 *
 * The same tree as ckpt_catalog_tree_json, read without JSON: a value is
 * an opaque handle (ckpt_value) whose kind says which accessors apply.
 * Values are read-only and live as long as the catalog (ckpt_catalog_tree)
 * or the plan (ckpt_plan_tree, below) that gave them; they may be read from any
 * thread.  An accessor asked of a value of another kind gives its zero
 * (false, 0, NULL), never a crash; a NULL value is of kind CKPT_VALUE_NULL.
 *
 * A tree may nest as deep as its reader allowed (ckpt_catalog_options): a
 * walker that must run on a small stack keeps its levels on the heap.
 *
 * Kind                 what it holds                       its JSON (ckpt_catalog_tree_json)
 *   NULL, BOOL         None, a bool                        null, true
 *   INT, FLOAT         an int64, a double                  1, 1.0 (non-finite: {"__float__": "nan"})
 *   NUMBER             a number from JSON text, as written  the text
 *   STRING             UTF-8 text                          "s"
 *   BYTES              bytes                               {"__bytes__": "<hex>"}
 *   BIGINT             an int beyond int64: its bytes,      {"__int_le__": "<hex>"}
 *                      little-endian two's complement
 *   TENSOR             a tensor, by name                   {"__tensor__": "name"}
 *   GLOBAL             a class or function, "module.name"   {"__global__": "module.name"}
 *   LIST               items                               [a, b]
 *   TUPLE              items; a class ("torch.Size")       {["__class__": c, ]"__tuple__": [...]}
 *   SET                items                               {"__set__": [...]}
 *   CALL               a reconstructor call: its callable   {"__call__": "module.name", "args": [...]
 *                      (the class), args as items, a state  [, "state": s]}
 *   DICT               key/value pairs in order (keys of    {["__class__": c, ]"__dict__": [[k, v], ...]
 *                      any scalar kind); a class            [, "__state__": s]}
 *                      ("collections.OrderedDict"), a state
 *   OBJECT             string-keyed pairs in order: any     {"key": value, ...}
 *                      other JSON object ({"__shards__": […]})
 */
typedef struct ckpt_value ckpt_value;

typedef enum ckpt_value_kind {
    CKPT_VALUE_NULL = 0,
    CKPT_VALUE_BOOL = 1,
    CKPT_VALUE_INT = 2,
    CKPT_VALUE_FLOAT = 3,
    CKPT_VALUE_NUMBER = 4,
    CKPT_VALUE_STRING = 5,
    CKPT_VALUE_BYTES = 6,
    CKPT_VALUE_BIGINT = 7,
    CKPT_VALUE_TENSOR = 8,
    CKPT_VALUE_GLOBAL = 9,
    CKPT_VALUE_LIST = 10,
    CKPT_VALUE_TUPLE = 11,
    CKPT_VALUE_SET = 12,
    CKPT_VALUE_CALL = 13,
    CKPT_VALUE_DICT = 14,
    CKPT_VALUE_OBJECT = 15,
} ckpt_value_kind;

/* The catalog's object tree (what ckpt_catalog_tree_json writes), or NULL
 * when it has none (safetensors). */
CKPT_API const ckpt_value *ckpt_catalog_tree(const ckpt_catalog *catalog);

/* The value's kind (CKPT_VALUE_NULL for NULL). */
CKPT_API ckpt_value_kind ckpt_value_kind_of(const ckpt_value *value);

/* A BOOL's truth (1 or 0); an INT's value; a FLOAT's value. */
CKPT_API int ckpt_value_bool(const ckpt_value *value);
CKPT_API int64_t ckpt_value_int(const ckpt_value *value);
CKPT_API double ckpt_value_float(const ckpt_value *value);

/*
 * The text of a STRING (UTF-8), a NUMBER (as written), a TENSOR (the
 * tensor's name: the catalog's for ckpt_catalog_tree, the output's for
 * ckpt_plan_tree) or a GLOBAL ("module.name"), and the bytes of a BYTES or
 * a BIGINT (little-endian two's complement); *len (when not NULL) is their
 * length.  The bytes are followed by a NUL, which a STRING or a BYTES may
 * also hold.  NULL (and *len 0) for another kind.
 */
CKPT_API const char *ckpt_value_text(const ckpt_value *value, size_t *len);

/* The number of items of a LIST, TUPLE, SET or CALL (its args), or of
 * pairs of a DICT or OBJECT; 0 for another kind. */
CKPT_API size_t ckpt_value_len(const ckpt_value *value);

/* Item i of a LIST, TUPLE, SET or CALL (arg i); NULL out of range. */
CKPT_API const ckpt_value *ckpt_value_item(const ckpt_value *value, size_t i);

/* The key and the value of pair i of a DICT (keys of the kinds torch
 * kept: INT, STRING, …) or an OBJECT (its keys are STRINGs); NULL out of
 * range. */
CKPT_API const ckpt_value *ckpt_value_key(const ckpt_value *value, size_t i);
CKPT_API const ckpt_value *ckpt_value_at(const ckpt_value *value, size_t i);

/* The class torch.load gives a TUPLE or a DICT ("torch.Size",
 * "collections.OrderedDict"), or a CALL's callable ("module.name"); NULL
 * for a plain tuple or dict and for other kinds. */
CKPT_API const char *ckpt_value_class(const ckpt_value *value);

/* The state a DICT (an OrderedDict's _metadata) or a CALL was given by
 * pickle's BUILD, or NULL. */
CKPT_API const ckpt_value *ckpt_value_state(const ckpt_value *value);

/* The value of `key` in the `__metadata__` of data file `file` alone (a
 * shard's own map), or NULL. */
CKPT_API const char *ckpt_catalog_file_metadata(const ckpt_catalog *catalog, size_t file, const char *key);

/* The XXH3-64 digests the checkpoint's files record of its tensors (a
 * writer with `checksums` records them under CKPT_CHECKSUM_METADATA_KEY):
 * for each tensor i of the catalog, digests[i] and recorded[i] = 1, or
 * recorded[i] = 0 where its file records none.  Both arrays hold
 * ckpt_catalog_tensor_count entries.  Reads each recording file's header
 * again and checks it against its recorded digest (CKPT_E_CHECKSUM when it
 * changed); reads no tensor data. */
CKPT_API ckpt_status ckpt_catalog_recorded_digests(const ckpt_catalog *catalog, uint64_t *digests,
                                                   unsigned char *recorded, ckpt_error *err);

/* Where a tensor's chunk digests are, in ckpt_catalog_recorded_chunks. */
typedef struct ckpt_chunk_record {
    uint64_t chunk_bytes; /* 0: none recorded for this tensor */
    uint64_t phase;       /* its data's file offset modulo chunk_bytes */
    size_t first, count;  /* its digests: digests[first .. first + count) */
} ckpt_chunk_record;

/* The per-chunk XXH3-64 digests the checkpoint's files record of their
 * large tensors (CKPT_CHUNK_METADATA_KEY): records[i] for each tensor i of
 * the catalog (ckpt_catalog_tensor_count entries), and *total, the number
 * of digests.  `digests` (NULL, or room for `capacity`) receives them when
 * they fit; call again with room for *total when they did not.  Checks the
 * headers as ckpt_catalog_recorded_digests does; reads no tensor data. */
CKPT_API ckpt_status ckpt_catalog_recorded_chunks(const ckpt_catalog *catalog, ckpt_chunk_record *records,
                                                  uint64_t *digests, size_t capacity, size_t *total,
                                                  ckpt_error *err);


/*
 * The `__metadata__` map (string → string).  For a sharded checkpoint it is
 * the union of the shards' maps; where shards disagree the first shard's
 * value is kept.  Entries keep the order of the file.
 */
CKPT_API size_t ckpt_catalog_metadata_count(const ckpt_catalog *catalog);

/* The i-th metadata entry; returns CKPT_E_OUT_OF_RANGE past the end. */
CKPT_API ckpt_status ckpt_catalog_metadata_entry(const ckpt_catalog *catalog, size_t i,
                                                 const char **key, const char **value);

/* The metadata value for `key`, or NULL. */
CKPT_API const char *ckpt_catalog_metadata_get(const ckpt_catalog *catalog, const char *key);

/*
 * Where a tensor's data lies, chunk by chunk.  Most tensors are stored
 * whole: one chunk covering the tensor.  A tensor of a distributed
 * checkpoint (CKPT_FORMAT_DCP) is stored as boxes, each written by one
 * rank into its own file; the chunks tile the tensor (checked on open).
 */
typedef struct ckpt_chunk_info {
    uint32_t file;         /* its data file (ckpt_catalog_file_path)          */
    const uint64_t *start; /* ndim: the box's first element in the tensor     */
    const uint64_t *count; /* ndim: the box's extent along each axis          */
    uint64_t offset;       /* byte of the box's first element in the file (as
                              ckpt_tensor_info.offset: no place in the file
                              when the data is compressed) */
} ckpt_chunk_info;

/* Number of chunks a tensor is stored in (0 for a tensor that is not the
 * catalog's). */
CKPT_API size_t ckpt_catalog_chunk_count(const ckpt_catalog *catalog, const ckpt_tensor_info *tensor);

/* The i-th chunk of a tensor (pointers live as long as the catalog);
 * CKPT_E_OUT_OF_RANGE past the last. */
CKPT_API ckpt_status ckpt_catalog_chunk(const ckpt_catalog *catalog, const ckpt_tensor_info *tensor, size_t i,
                                        ckpt_chunk_info *chunk, ckpt_error *err);

/*
 * Copies `nbytes` bytes of a tensor's data, starting `byte_offset` bytes into
 * the tensor, into `dst` (any alignment), with large pread calls.  Safe to
 * call from many threads at once.  Fails with CKPT_E_OUT_OF_RANGE when the
 * range is outside the tensor, CKPT_E_TRUNCATED when the file became shorter.
 * A read of the whole tensor (byte_offset 0, nbytes its size) checks the
 * CRC-32 of the ZIP member it lies in when the tensor covers the member, as
 * ckpt_load does (CKPT_E_CHECKSUM on a mismatch); reads of parts check
 * nothing (ckpt_verify checks every member).
 */
CKPT_API ckpt_status ckpt_catalog_read(const ckpt_catalog *catalog, const ckpt_tensor_info *tensor,
                                       uint64_t byte_offset, void *dst, uint64_t nbytes,
                                       ckpt_error *err);

/*
 * A read-only, zero-copy view of a tensor's bytes through a memory mapping
 * of its file (mapped on first use, shared by all views of that file).  The
 * view lives as long as the catalog.  For an empty tensor *data is a valid,
 * non-NULL pointer to zero bytes.  Data may not be aligned to the element
 * size.  Only for tensors stored as they are read — dense, little-endian,
 * uncompressed — else CKPT_E_INVALID_ARGUMENT: use ckpt_catalog_read, which
 * converts.
 *
 * Views and a file that changes.  A view (this one, a private mapping of
 * ckpt_catalog_map_file, ckpt_load's options->views) is the file itself,
 * not a copy: if the file is truncated while a view of it lives (another
 * process rewriting it in place, a download replaced by a shorter one),
 * touching a byte of the view past the file's new end raises SIGBUS, which
 * kills the process unless it handles the signal — as with every mapping
 * of a file (safetensors' load_file, numpy's mmap_mode, torch.load's
 * mmap=True).  A file rewritten in place changes what the view shows (a
 * private mapping keeps only the pages written to).  Memory that no change
 * of the file can reach is a read: ckpt_catalog_read, ckpt_load without
 * views (Python: ckpt.load(copy=True)).  Replacing a file by rename, as
 * every writer of ckpt does, leaves existing views on the old file, intact.
 */
CKPT_API ckpt_status ckpt_catalog_view(ckpt_catalog *catalog, const ckpt_tensor_info *tensor,
                                       const void **data, ckpt_error *err);

/*
 * A private, copy-on-write mapping of a catalog's data file `file`:
 * writable memory holding the file, whose writes never reach the file —
 * what a framework can own as tensors, as safetensors' load_file hands
 * out.  It outlives the catalog.  Tensors stored as they are read (dense,
 * little-endian, uncompressed) lie at their info's `offset`.
 * With CKPT_MAP_PREFETCH, a background thread reads the file into the page
 * cache at full queue depth (one readahead window per call), so that first
 * touches find their pages: only when the file fits in half of the
 * machine's available memory and is not cached already.  Files on network
 * file systems and remote sources cannot be mapped
 * (CKPT_E_INVALID_ARGUMENT): read them.  A file truncated while mapped
 * raises SIGBUS where its vanished pages are touched: see ckpt_catalog_view.
 */
typedef struct ckpt_mapping ckpt_mapping;

#define CKPT_MAP_PREFETCH 1u

CKPT_API ckpt_status ckpt_catalog_map_file(ckpt_catalog *catalog, size_t file, unsigned flags, ckpt_mapping **out,
                                           ckpt_error *err);
CKPT_API void *ckpt_mapping_data(const ckpt_mapping *mapping);
CKPT_API uint64_t ckpt_mapping_size(const ckpt_mapping *mapping);
/* Whether a prefetch was started (the file was large enough, not cached,
 * and fit in half of the available memory). */
CKPT_API int ckpt_mapping_prefetching(const ckpt_mapping *mapping);
/* Unmaps.  Accepts NULL. */
CKPT_API void ckpt_mapping_free(ckpt_mapping *mapping);

/* ------------------------------------------------------------------------ */
/* Sizes                                                                    */
/* ------------------------------------------------------------------------ */

/*
 * Parses a shard size.  Accepts what huggingface_hub's parse_size_to_int
 * accepts — a decimal number (fractions allowed) followed by KB, MB, GB or
 * TB, case-insensitive, powers of ten ("5GB" = 5,000,000,000) — plus binary
 * units KiB, MiB, GiB, TiB (powers of 1024), a bare "B", and plain integers
 * (bytes).  Spaces around the number and unit are allowed.
 */
CKPT_API ckpt_status ckpt_parse_size(const char *text, uint64_t *bytes, ckpt_error *err);

/* huggingface_hub's default max_shard_size, "5GB". */
#define CKPT_DEFAULT_MAX_SHARD_SIZE 5000000000ULL

/*
 * A byte count for people: "999 B", "1.5 KiB", "86.6 MiB" — binary units
 * with one decimal, never more than three digits before the point (a value
 * that would show as 1000.0 of a unit shows as 1.0 of the next: "999.9
 * KiB", then "1.0 MiB").  Writes at most `cap` bytes into `out` (10 always
 * suffice) and returns `out`.  The command-line tool writes every size so.
 */
CKPT_API char *ckpt_format_size(uint64_t bytes, char *out, size_t cap);

/*
 * One line of a progress display, as ckpt's command-line tool and the
 * Python package draw it on a terminal (so that the two cannot differ):
 *
 *   converting [###############.........]  62%    1.2 GiB / 2.0 GiB  310.5 MiB/s  ETA 0:03
 *
 * `label`, a bar, the percentage of `total` bytes `done`, the sizes
 * (ckpt_format_size), the rate over `elapsed` seconds, and the time left
 * ("ETA 0:03", "ETA 12:34", "ETA 1h02m"; "ETA -:--" until a rate is
 * known) — or `note` in its place when not
 * NULL (e.g. "syncing…" once every byte is written, the rate then left
 * out).  Every part keeps its width as its numbers grow, so redrawing
 * moves nothing; the bar takes what the others leave of `width - 1`
 * columns (10 to 40 cells).  On a narrow terminal parts are dropped — the
 * rate first, then the sizes, the bar, the ETA, the percentage — and the
 * label truncated: the line never reaches column `width`, so the cursor
 * never wraps.  Writes at most `cap` bytes (NUL included) into `out` and
 * returns the line's length in bytes (a UTF-8 label or note may take
 * several bytes per column).  Draw it as "\r" + line + "\033[K".
 */
CKPT_API size_t ckpt_progress_line(char *out, size_t cap, unsigned width, const char *label, uint64_t done,
                                   uint64_t total, double elapsed, const char *note);

/* ------------------------------------------------------------------------ */
/* Writer: a new checkpoint, one file, split parts or a directory           */
/* ------------------------------------------------------------------------ */

/*
 * Progress callback: `done` of `total` bytes of tensor data are done
 * (written, read, checked).  Return non-zero to cancel (the operation then fails with
 * CKPT_E_CANCELLED and leaves nothing behind).  Given in an operation's
 * options (writer, load, verify options), with their `user` pointer.
 */
typedef int (*ckpt_progress_fn)(uint64_t done, uint64_t total, void *user);

typedef struct ckpt_writer ckpt_writer;

typedef struct ckpt_writer_options {
    size_t size; /* sizeof(ckpt_writer_options), set by ckpt_writer_options_init */
    /*
     * The most bytes of tensor data per file, for the formats that split
     * (safetensors, GGUF); the destination (ckpt_destination_resolve)
     * says where the files go:
     *   - a directory: Hugging Face shards, a larger tensor in a shard of
     *     its own, named "<prefix>-00001-of-0000N.safetensors" with
     *     "<prefix>.safetensors.index.json", or "<prefix>.safetensors"
     *     alone when everything fits in one; 0 means
     *     CKPT_DEFAULT_MAX_SHARD_SIZE (the hub's 5 GB);
     *   - a file "<stem>.safetensors": that file when everything fits in
     *     one, else its parts beside it, "<stem>-00001-of-0000N.safetensors"
     *     with "<stem>.safetensors.index.json" (what
     *     huggingface_hub's save_torch_state_dict writes with
     *     filename_pattern "<stem>{suffix}.safetensors"); 0: one file,
     *     whatever its size (as safetensors' save_file);
     *   - a GGUF file: gguf-split's parts (see `format`).
     * A format that writes one file (torch, npy, npz, flax-msgpack), or
     * DCP's directory, refuses it (CKPT_E_INVALID_ARGUMENT).
     */
    uint64_t max_shard_size;
    /* A directory destination's file name prefix; NULL means "model".  A
     * file destination names its own files after its stem: a prefix
     * other than the stem is refused. */
    const char *prefix;
    /* Non-zero: replace an existing checkpoint at the destination (its
     * files are replaced only after the new ones are complete; shards of the
     * old checkpoint that the new one does not use are then removed). */
    int overwrite;
    /* Non-zero: skip fsync (tests, scratch output).  Renames stay atomic. */
    int no_sync;
    /* Non-zero: record each tensor's XXH3-64 checksum in its file's
     * `__metadata__` under CKPT_CHECKSUM_METADATA_KEY (see ckpt_verify).
     * Data then passes through the writer, which hashes it as it streams,
     * so each tensor's bytes must arrive in order. */
    int checksums;
    /* Tensors declared on one storage (ckpt_writer_add_tensor_shared)
     * whose overlapping areas no single tensor covers: 0 refuses them, as
     * huggingface_hub does; non-zero writes each as a copy of its own. */
    int copy_partial_views;
    /*
     * The output format; 0: the one the path names (ckpt_destination_resolve:
     * its suffix, else safetensors).  Set, it must agree with the path's
     * suffix.  GGUF output is laid out byte for byte as gguf-py's
     * GGUFWriter lays it out (general.architecture first, then the other
     * metadata in the order it was set; tensors in declaration order, each
     * padded to general.alignment, 32 by default).  Metadata values that
     * are typed JSON (see ckpt_kv) become typed key-values, other values
     * strings.  With max_shard_size or gguf->split_max_tensors, GGUF output is
     * split as gguf-split splits it, into "<stem>-00001-of-0000N.gguf"
     * files beside the path (a tensor starts a new file when the padded
     * data would pass max_shard_size, or after gguf->split_max_tensors tensors);
     * the first file holds every key-value, each file split.no,
     * split.count and split.tensors.count.  When everything fits one file,
     * it is the path itself, without split keys.  CKPT_FORMAT_DCP: a
     * torch.distributed.checkpoint directory at the path, which
     * torch.distributed.checkpoint.load reads on any number of ranks (no
     * string metadata, no checksums; a torch file's object tree is kept
     * as DCP objects).  CKPT_FORMAT_NPZ, CKPT_FORMAT_FLAX_MSGPACK: as
     * np.savez and flax.serialization.to_bytes write them.
     * CKPT_FORMAT_NPY: one array, as np.save writes it (a checkpoint of
     * more tensors is refused, naming them: write .npz).
     * CKPT_FORMAT_TORCH: the state dict {name: tensor} as torch.save
     * writes it, which torch.load(weights_only=True) reads back — byte for
     * byte torch.save's file for a dict of separate tensor objects (as
     * model.state_dict() gives), its .data/serialization_id record
     * included (torch computes it from the records' names and CRC-32s).
     * Tensors declared on one storage (ckpt_writer_add_tensor_shared) stay
     * on one storage when one of them covers it whole (tied weights; views
     * inside a saved tensor, at their storage_offset); a view of a storage
     * no saved tensor covers, or a non-contiguous one, becomes a storage of
     * its own holding its bytes (torch.save would also keep the bytes no
     * saved tensor reaches).  No string metadata: a torch file has no
     * place for it.  bf16 and the float8s are written as torch names them
     * (torch.bfloat16, torch.float8_e4m3fn, …); GGUF's block types are
     * refused (CKPT_D_UNSUPPORTED_DTYPE).
     */
    ckpt_format format;
    /* A directory whose other files (config.json, tokenizer files,
     * generation_config.json, … every regular, non-hidden file that is not
     * a checkpoint's) are copied into the output, committed with it; NULL:
     * none.  In ckpt_convert_plan, when the plan's casts leave every float
     * tensor of one dtype, config.json's "dtype" (or "torch_dtype") gets
     * that dtype's torch name, every other byte kept; with float tensors of
     * several dtypes left, it is copied as it is. */
    const char *copy_files_from;
    /*
     * Options only one output format reads (<ckpt_gguf.h>, <ckpt_dcp.h>),
     * copied by ckpt_writer_create; NULL: that format's defaults.  Options
     * of one format that ask for something while another is written are
     * refused (CKPT_E_INVALID_ARGUMENT).
     */
    const struct ckpt_gguf_writer_options *gguf;
    /*
     * Metadata that adds to or replaces the source's in ckpt_convert_plan:
     * a JSON object text {key: value}.  A string is a
     * string; a typed value {"gguf_type": ...} is that GGUF value; other
     * JSON values are typed as gguf-py types them (an integer i32, or i64
     * when it does not fit; a number f32; a bool bool; a list an array).
     * A key already present keeps its place.  NULL: none.
     */
    const char *metadata_json;
    const struct ckpt_dcp_writer_options *dcp;
    /*
     * Non-zero: a dry run.  Nothing is created, copied or replaced:
     * ckpt_writer_begin plans the files and their layout (file count, paths,
     * ckpt_writer_tensor_file, ckpt_writer_tensor_kept tell what they would
     * be), data is refused, and ckpt_writer_commit publishes nothing (it
     * names the side files, such as an index, that would be written).  The
     * checks on the destination (an existing checkpoint without overwrite)
     * apply as in a real run.  See ckpt_convert_plan_preview.
     */
    int dry_run;
    /*
     * Non-zero: an index (sharded safetensors output) records
     * "total_parameters" in its "metadata", as transformers' save_pretrained
     * does: the elements of the tensors written, each storage's bytes
     * counted once (tensors deduplicated away are not counted).
     * huggingface_hub's save_torch_state_dict does not write it (0, the
     * default, is byte-identical to it).  ckpt_convert_plan sets it when
     * the source's index has it.
     */
    int total_parameters;
    /*
     * ckpt_convert_plan: non-zero does not check the
     * source's ZIP CRC-32s.  By default a conversion checks the CRC-32 of
     * every member of a torch.save file, a DCP file's torch.save items or
     * an .npz archive whose bytes it reads whole, as a load does (see
     * ckpt_load_options.skip_crc_check): those bytes then pass through
     * memory instead of being copied by the kernel.  A mismatch fails
     * before anything is published.
     */
    int skip_crc_check;
    /*
     * ckpt_convert_plan into GGUF: non-zero carries the
     * source's metadata into the output as key-values (string values) — a
     * safetensors `__metadata__` ({"format": "pt"}, `removed → kept`, a
     * caller's entries), a torch file's {"format": "pt"} and object tree.
     * 0 (the default): a GGUF output holds only GGUF key-values: a GGUF
     * source's own, and metadata_json's.  Other output formats always carry
     * the source's metadata, but for a llama.cpp GGUF converted to a Hugging
     * Face directory (ckpt_gguf_hf_plan), whose key-values become
     * config.json and the tokenizer's files: its safetensors hold
     * {"format": "pt"}, as save_pretrained writes, and the key-values only
     * when this is non-zero.
     */
    int source_metadata;
    /*
     * Non-zero: the path is the one file written, in `format` (safetensors
     * when 0), whatever its name — the destination rule's suffixes and
     * directories do not apply, as safetensors' save_file and torch.save
     * take any file name (the Python drop-ins ckpt.torch.save_file and
     * ckpt.numpy.save_file set it).  A path ending in '/' or naming a
     * directory is refused, and so is max_shard_size.
     */
    int exact_file;
    /* Progress of ckpt_convert_plan and ckpt_convert_collective: bytes of
     * tensor data written; non-zero cancels (CKPT_E_CANCELLED, nothing left
     * behind).  Called from the converting thread, at most every few
     * megabytes.  A writer driven by hand (ckpt_writer_create) never calls
     * it.  NULL: none. */
    ckpt_progress_fn progress;
    void *user;
    /*
     * Non-zero: each range written (or copied) starts its write-back at
     * once, and leaves the page cache once it is on disk (drop-behind,
     * about 32 MiB of output stays dirty).  The disk then works while the
     * caller goes on producing bytes — hashing the rest of an incremental
     * save, a collective save's other ranks — and the commit's fsync finds
     * little left to wait for; a saved checkpoint does not evict a
     * training job's data from the cache.  Ignored with no_sync, which
     * asked not to wait for the disk (drop-behind waits for older ranges).
     */
    int write_back;
} ckpt_writer_options;

/* The `__metadata__` key of checksums: a JSON object text,
 * {"__metadata__": "<hex>", "<tensor>": "<hex>", …} with the XXH3-64 (16
 * lower-case hex digits) of each tensor of that file, and under
 * "__metadata__" (never a tensor name) that of the file's 8 + N header
 * bytes as written with every digest of this map (and of
 * CKPT_CHUNK_METADATA_KEY's) zeroed.  A flipped bit
 * anywhere in the file is then found by ckpt_verify. */
#define CKPT_CHECKSUM_METADATA_KEY "ckpt.xxh3_64"

/* The `__metadata__` key of chunk checksums, written beside
 * CKPT_CHECKSUM_METADATA_KEY for the file's tensors of at least
 * CKPT_CHUNKED_MIN_BYTES: a JSON object text,
 * {"__chunk_bytes__": "1048576", "<tensor>": "<hex><hex>…", …} with, per
 * tensor, the XXH3-64 (16 lower-case hex digits each, concatenated) of each
 * of its chunks.  Chunk edges are the file's multiples of the chunk size
 * (1 MiB, 256 blocks of 4 KiB), not the tensor's: a tensor whose data
 * begins `phase` bytes past an edge (its file offset modulo the chunk
 * size) has chunk k = its bytes [max(0, k·C − phase), min(n, (k+1)·C −
 * phase)), and ceil(n / C) + 1 chunks whatever its phase (the header's
 * length must not depend on where the data lands), the last one empty when
 * the tensor ends before it.  So a chunk that an incremental save clones
 * from a base of the same layout is whole file blocks, which a reflink
 * shares (a tensor-relative chunk would split a block at each of its edges:
 * safetensors places tensor data at any 8-byte offset).  The map is part of
 * the header the "__metadata__" digest covers, its digests zeroed as
 * well.  ckpt_verify checks each chunk and names the tensor and the byte
 * range of one that changed. */
#define CKPT_CHUNK_METADATA_KEY "ckpt.xxh3_64_chunks"
/* The chunk size a writer uses, and the smallest tensor it records chunk
 * digests of. */
#define CKPT_CHUNK_BYTES ((uint64_t)1 << 20)
#define CKPT_CHUNKED_MIN_BYTES ((uint64_t)4 << 20)

/* Fills options with the defaults (single file, prefix "model", no
 * overwrite, fsync on) and their size. */
/* Fills the first `size` bytes of options with the defaults, and `size`
 * with `size`: the caller's sizeof, so that a library newer than the
 * caller's header writes only the fields the caller has. */
CKPT_API void ckpt_writer_options_init_sized(ckpt_writer_options *options, size_t size);
static inline void ckpt_writer_options_init(ckpt_writer_options *options) {
    ckpt_writer_options_init_sized(options, sizeof *options);
}

/*
 * The destination rule: what a writer (ckpt_writer_create), a conversion
 * (ckpt_convert_plan, its preview and the collective
 * ones) and every front end (the CLI, Python, Rust, Elixir) write for
 * `path`, in this order:
 *   1. A path ending in '/', or naming an existing directory (or a link
 *      to one), is a directory: of options->format, else safetensors
 *      shards (max_shard_size, 5 GB by default, and an index, or one
 *      "<prefix>.safetensors"); DCP writes its ranks' files there.  A
 *      format that writes one file is refused, naming a file to give.
 *   2. Else a name ending in a suffix of ckpt_format_for_path is a file of
 *      that format ("x.safetensors", "pytorch_model.bin", "o.pt",
 *      "w.npy") — or, with max_shard_size, that file's split parts
 *      beside it ("x-00001-of-00003.safetensors" and
 *      "x.safetensors.index.json"; gguf-split's "x-00001-of-00003.gguf"),
 *      its directory made when missing.  options->format, when set, must
 *      be that format.
 *   3. Else a name ending in a checkpoint suffix that ckpt does not write
 *      — an index (".safetensors.index.json", ".bin.index.json"), a DCP
 *      part (".distcp"), another framework's file (".ckpt", ".h5",
 *      ".onnx", ".pdparams", ".tflite", ".pb", …) — is refused.
 *   4. Else (a name without a checkpoint suffix, "out", "run.v2") it is a
 *      directory, as in 1, for safetensors and DCP; a format that writes
 *      one file, asked for by options->format, writes a file of that name.
 * Refusals are CKPT_E_INVALID_ARGUMENT naming the path and listing what
 * ckpt writes.  The parents of a file or a directory are created when
 * missing (not by a dry run).  options->exact_file sets the rule aside: the
 * path is then one file of options->format, whatever its name.
 *
 * *format receives the format written and *directory 1 for a directory,
 * 0 for a file (or its parts); either may be NULL.  `options` may be NULL.
 * Nothing is created: this only looks at the name and, through stat(2),
 * at what is there.
 */
CKPT_API ckpt_status ckpt_destination_resolve(const char *path, const ckpt_writer_options *options,
                                              ckpt_format *format, int *directory, ckpt_error *err);

/*
 * Creates a writer for `path` (see ckpt_writer_options): a file, its split
 * parts or a directory, of the format ckpt_destination_resolve gives.
 * Nothing is written yet.  Fails with CKPT_E_EXISTS if a checkpoint is
 * already there (the file, or any of its parts) and options->overwrite
 * is 0.  `options` may be NULL for the defaults.
 *
 * The writer locks its destination until ckpt_writer_free (flock(2):
 * released by the kernel if the process dies): a second writer of the same
 * destination, in any process, fails at once with CKPT_E_LOCKED naming the
 * first one's pid.  An existing directory is locked itself; a directory
 * still to be made, or a single file, is locked through a lock file beside
 * it, ".<name>.ckpt-lock", which holds the writer's pid and is removed with
 * the lock (a writer killed meanwhile leaves it: the next writer of that
 * destination, or into the directory holding it, removes it).  Then, under the lock, a commit a crash cut
 * short in the directory the files go to is finished as
 * ckpt_commit_recover does (a journal that is not provably ckpt's fails
 * the create with CKPT_E_INCOMPLETE, and is left alone).  A dry run
 * (options->dry_run) locks and changes nothing.
 */
CKPT_API ckpt_status ckpt_writer_create(const char *path, const ckpt_writer_options *options,
                                        ckpt_writer **out, ckpt_error *err);

/*
 * Adds a `__metadata__` entry written into every file.  With at most one
 * entry the output is byte-identical to safetensors' own writer.  Keys must
 * be unique.  Only before ckpt_writer_begin().
 */
CKPT_API ckpt_status ckpt_writer_set_metadata(ckpt_writer *writer, const char *key,
                                              const char *value, ckpt_error *err);

/*
 * Adds an entry of the checkpoint's own metadata, placed as
 * huggingface_hub's save_torch_state_dict places its `metadata`: in the
 * file's `__metadata__` when the output is one file, in the index's
 * "metadata" (after "total_size") when it is sharded.  Keys must be unique
 * among these entries.  Only before ckpt_writer_begin().
 */
CKPT_API ckpt_status ckpt_writer_set_checkpoint_metadata(ckpt_writer *writer, const char *key, const char *value,
                                                         ckpt_error *err);

/*
 * Declares a tensor.  Declaration order is the "state dict order" that
 * shard packing walks; inside each file tensors are laid out as safetensors
 * does (by dtype alignment descending, then by name).  Names must be unique
 * and may not be "__metadata__".  Only before ckpt_writer_begin().
 * Returns the tensor's writer index (0, 1, 2, … in declaration order) in
 * *index when index is not NULL.
 */
CKPT_API ckpt_status ckpt_writer_add_tensor(ckpt_writer *writer, const char *name, ckpt_dtype dtype,
                                            uint32_t ndim, const uint64_t *shape, size_t *index,
                                            ckpt_error *err);

/*
 * Where a tensor's bytes lie in the caller's memory, so that tensors
 * sharing memory are saved as huggingface_hub's save_torch_state_dict
 * saves them: on one storage, tensors whose areas overlap are written once
 * — the first, by name, of those covering the whole storage — and the
 * others recorded in the checkpoint's metadata as `removed → kept` (a key
 * the caller set is kept).  Shards count each storage once, whole (a
 * contiguous view of a larger storage counts all of it, as the hub does),
 * and a tensor on a storage already placed joins that shard.
 */
typedef struct ckpt_tensor_storage {
    uint64_t id;         /* identifies the storage (e.g. its address and device); 0: shares nothing */
    uint64_t nbytes;     /* the storage's size in bytes */
    uint64_t begin, end; /* the tensor's bytes in it: its first element, one past its last in row-major order */
    int contiguous;      /* the tensor's elements are dense and row-major in the storage */
} ckpt_tensor_storage;

/* ckpt_writer_add_tensor with where the tensor lies (NULL: nowhere shared). */
CKPT_API ckpt_status ckpt_writer_add_tensor_shared(ckpt_writer *writer, const char *name, ckpt_dtype dtype,
                                                   uint32_t ndim, const uint64_t *shape,
                                                   const ckpt_tensor_storage *storage, size_t *index,
                                                   ckpt_error *err);

/* After begin: NULL when tensor `index` is written, else the name of the
 * tensor written in its place (its bytes, when sent, are dropped). */
CKPT_API const char *ckpt_writer_tensor_kept(const ckpt_writer *writer, size_t index);

/*
 * Ends declarations: computes the shard layout, the headers and the index,
 * creates the temporary files, reserves their space (so a full disk fails
 * here, before any data is written) and writes the headers.
 */
CKPT_API ckpt_status ckpt_writer_begin(ckpt_writer *writer, ckpt_error *err);

/* Number of output files (known after begin). */
CKPT_API size_t ckpt_writer_file_count(const ckpt_writer *writer);

/* The final path of the i-th output file (known after begin), or NULL. */
CKPT_API const char *ckpt_writer_file_path(const ckpt_writer *writer, size_t i);

/* The output file that holds a tensor (by writer index), after begin;
 * SIZE_MAX for a tensor deduplicated away. */
CKPT_API size_t ckpt_writer_tensor_file(const ckpt_writer *writer, size_t index);

/* Total bytes of tensor data declared (less the tensors deduplicated away,
 * after begin). */
CKPT_API uint64_t ckpt_writer_total_bytes(const ckpt_writer *writer);

/*
 * What a writer writes, read back: after ckpt_writer_begin every output
 * file is laid out and every tensor placed; after ckpt_writer_commit the
 * side files are named too.  A dry run (options->dry_run, or
 * ckpt_convert_plan_preview's writer) answers the same without having
 * written anything.  Strings live until ckpt_writer_free; NULL or 0 for a
 * NULL writer or an index past the end.
 */

/* The destination as given, normalised: the file, or the directory. */
CKPT_API const char *ckpt_writer_path(const ckpt_writer *writer);

/* The format written (ckpt_format_name names it). */
CKPT_API ckpt_format ckpt_writer_format(const ckpt_writer *writer);

/* 1 when the output is a directory, 0 for a file or a file's split parts
 * (ckpt_destination_resolve's rule). */
CKPT_API int ckpt_writer_is_directory(const ckpt_writer *writer);

/* After commit: the path that opens everything written with
 * ckpt_catalog_open — the directory, the index of a file's split parts,
 * the first of gguf-split's parts, or the file. */
CKPT_API const char *ckpt_writer_open_path(const ckpt_writer *writer);

/* The size in bytes of the i-th output file, as laid out at begin. */
CKPT_API uint64_t ckpt_writer_file_size(const ckpt_writer *writer, size_t i);

/* The lists of file names a writer keeps, each name relative to the
 * directory the files go to. */
typedef enum ckpt_writer_names {
    CKPT_WRITER_DATA_FILES = 0,    /* the output files (ckpt_writer_file_path: their paths) */
    CKPT_WRITER_SIDE_FILES = 1,    /* written after the data, at commit: an index, DCP's .metadata */
    CKPT_WRITER_COPIED_FILES = 2,  /* options->copy_files_from's files, copied along (after begin) */
    CKPT_WRITER_REPLACED_FILES = 3 /* an existing checkpoint's files that the commit replaces or
                                      removes (options->overwrite; known at create) */
} ckpt_writer_names;

/* How many names the list `which` holds, and the i-th (NULL past the end). */
CKPT_API size_t ckpt_writer_name_count(const ckpt_writer *writer, ckpt_writer_names which);
CKPT_API const char *ckpt_writer_name_at(const ckpt_writer *writer, ckpt_writer_names which, size_t i);

/* Number of tensors declared. */
CKPT_API size_t ckpt_writer_tensor_count(const ckpt_writer *writer);

/* A declared tensor, and after begin where it goes. */
typedef struct ckpt_writer_tensor_info {
    size_t size; /* sizeof(ckpt_writer_tensor_info), set by the caller */
    const char *name;
    ckpt_dtype dtype;
    uint32_t ndim;
    const uint64_t *shape;
    uint64_t nbytes;
    /* The output file holding it (ckpt_writer_tensor_file); SIZE_MAX for a
     * tensor deduplicated away, whose bytes are `kept`'s. */
    size_t file;
    const char *kept;
    uint64_t offset;     /* where its bytes begin in `file` (a tensor in parts: unused) */
    uint32_t part_count; /* 0: in one piece; else cut into byte ranges of several files
                            (DCP's ranks), see ckpt_writer_tensor_part */
} ckpt_writer_tensor_info;

/* Fills the first info->size bytes of *info with tensor `index`'s
 * (by writer index): 1, or 0 past the last tensor. */
CKPT_API int ckpt_writer_tensor_info_at(const ckpt_writer *writer, size_t index, ckpt_writer_tensor_info *info);

/* Part k of a tensor cut into parts: its bytes [*begin, *begin + *nbytes)
 * lie in output file *file from byte *offset (any pointer may be NULL).
 * Parts tile the tensor's bytes in order.  0 past its last part, else 1. */
CKPT_API int ckpt_writer_tensor_part(const ckpt_writer *writer, size_t index, uint32_t k, size_t *file,
                                     uint64_t *begin, uint64_t *nbytes, uint64_t *offset);

/*
 * Appends the next `nbytes` bytes of tensor `index` (from
 * ckpt_writer_add_tensor).  A tensor's bytes arrive in order, in chunks of
 * any size; different tensors may be written in any order.  Writing past the
 * declared size fails with CKPT_E_OUT_OF_RANGE.  The writer keeps no copy.
 */
CKPT_API ckpt_status ckpt_writer_write(ckpt_writer *writer, size_t index, const void *data,
                                       size_t nbytes, ckpt_error *err);

/*
 * Writes tensor `index` whole as a copy of tensor `src_index` of an open
 * checkpoint, by the kernel (copy_file_range: on XFS, btrfs and bcachefs a
 * reflink that shares the blocks wherever the source's and the output's
 * offsets agree modulo the block size — the same layout does — else a copy
 * inside the kernel; through a buffer across file systems or from a remote
 * source).  Instead of ckpt_writer_write, before any byte of that tensor.
 * `xxh3` is the XXH3-64 of those bytes as the caller knows them (e.g. of
 * the tensor in its memory, equal to what `src` records:
 * ckpt_catalog_recorded_digests); a writer with `checksums` records it as
 * the tensor's digest without reading the bytes, and ckpt_verify then
 * checks the copy against it.  A tensor with chunk digests
 * (ckpt_writer_tensor_chunks) records the ones `src` records of its
 * tensor, which must lie as the output's (same chunk size and phase: the
 * same layout).  Fails with CKPT_E_INVALID_ARGUMENT when the sizes differ,
 * the source's bytes are not stored as they are (compressed, byte-swapped,
 * in pieces) or its chunk digests are missing or lie elsewhere (then give
 * the digests and copy with ckpt_writer_copy_range).  The base of
 * incremental saves.
 */
CKPT_API ckpt_status ckpt_writer_copy_tensor(ckpt_writer *writer, size_t index, const ckpt_catalog *src,
                                             size_t src_index, uint64_t xxh3, ckpt_error *err);

/*
 * After ckpt_writer_begin, with `checksums`: whether tensor `index` gets
 * chunk digests (CKPT_CHUNK_METADATA_KEY), and how its chunks lie: *count
 * chunks of *chunk_bytes, its data *phase bytes past a chunk edge; *count
 * 0 when it gets none.  What an incremental save hashes the tensor's
 * memory by, to compare with the base's chunks (ckpt_catalog_recorded_chunks).
 */
CKPT_API ckpt_status ckpt_writer_tensor_chunks(const ckpt_writer *writer, size_t index, uint64_t *chunk_bytes,
                                               uint64_t *phase, size_t *count, ckpt_error *err);

/*
 * A tensor whose digests the caller knows (of its memory): `xxh3`, that of
 * the whole, and `chunks` (count of them, as ckpt_writer_tensor_chunks
 * says; NULL and 0 for a tensor without chunks), recorded as they are.
 * Before any byte of that tensor.  Its bytes then come, in order, from
 * memory (ckpt_writer_write) and from a base checkpoint
 * (ckpt_writer_copy_range), so that an incremental save clones the chunks
 * that did not change and writes the others; ckpt_verify checks the result
 * against these digests.
 */
CKPT_API ckpt_status ckpt_writer_give_digests(ckpt_writer *writer, size_t index, uint64_t xxh3,
                                              const uint64_t *chunks, size_t count, ckpt_error *err);

/*
 * The next `nbytes` of tensor `index` (after its digests were given:
 * ckpt_writer_give_digests), copied by the kernel from the same byte
 * numbers of tensor `src_index` of an open checkpoint: a reflink where the
 * file system shares blocks and both offsets agree modulo its block size
 * (as ckpt_writer_copy_tensor).  The tensors' sizes may differ — a tensor
 * that grew since the base (rows appended to an embedding) copies the
 * leading bytes it shares with it — but the range must lie within the
 * source's bytes.  Fails with CKPT_E_INVALID_ARGUMENT when it does not or
 * the source's bytes are not stored as they are.
 */
CKPT_API ckpt_status ckpt_writer_copy_range(ckpt_writer *writer, size_t index, const ckpt_catalog *src,
                                            size_t src_index, uint64_t nbytes, ckpt_error *err);

/*
 * Whether the kernel can share the blocks of
 * file `src_file` of `src` with this writer's output (a reflink: XFS with
 * reflink=1, btrfs, bcachefs), tried by cloning the source's first block
 * into an unnamed temporary file in the output's folder, which then goes.
 * *shares is 0 where it cannot — ext4, tmpfs, another file system, a
 * remote source — and there ckpt_writer_copy_tensor and
 * ckpt_writer_copy_range copy in the kernel: every byte is read from the
 * disk and written again, slower than writing it from memory (4 GB on
 * ext4: 9.1 s against a full save's 6.4 s).  What an incremental save asks
 * before it clones anything.  Fails only on bad arguments.
 */
CKPT_API ckpt_status ckpt_writer_shares_blocks(const ckpt_writer *writer, const ckpt_catalog *src, size_t src_file,
                                               int *shares, ckpt_error *err);

/*
 * Checks that every tensor received all its bytes, flushes and fsyncs every
 * file, renames them into place (shards first, the index last) and fsyncs
 * the directory.  On failure nothing is left under a final name that was not
 * there before, and the temporaries are removed.
 */
CKPT_API ckpt_status ckpt_writer_commit(ckpt_writer *writer, ckpt_error *err);

/* After a successful commit: how many paths it published, and the i-th
 * (NULL past the end) — the data files, then the side files (an index),
 * then the files copied along (copy_files_from).  0 before a commit, and
 * for a dry run. */
CKPT_API size_t ckpt_writer_published_count(const ckpt_writer *writer);
CKPT_API const char *ckpt_writer_published_path(const ckpt_writer *writer, size_t i);

/* Releases a writer.  If it was not committed, its temporary files are
 * removed and the destination is left as it was.  Accepts NULL. */
CKPT_API void ckpt_writer_free(ckpt_writer *writer);

/* ---- interrupted commits ------------------------------------------------ */

/* ckpt_commit_recover's flags. */
enum {
    CKPT_RECOVER_CHECK = 1 /* check the journal and report; change nothing and take no lock */
};

/*
 * Finishes a commit into directory `dir` that a crash cut short.
 *
 * A writer that replaces files in a directory holding others (an old
 * checkpoint, config.json, …) stages the new files in a directory inside it
 * and, once they are all durable, decides the commit by writing a journal,
 * `dir/.ckpt-commit.json`, listing the old files to remove and the new ones
 * to publish.  A crash after that leaves the journal, and the commit is
 * finished by this call, by `ckpt recover DIR`, by Python's
 * ckpt.recover(dir), or by the next writer into the directory.  Opening
 * the checkpoint (ckpt_catalog_open) never does it, and fails with
 * CKPT_E_INCOMPLETE until it is done.
 *
 * What it validates.  A directory may come from elsewhere with a journal
 * planted in it, so a journal is executed only when it is provably one ckpt
 * wrote, every rule holding:
 *   - its bytes follow the journal's grammar exactly, nothing after;
 *   - its staging directory is named exactly as ckpt names a commit's
 *     stage ("..commit.ckpt-tmp-<pid>-d<n>") and is a real directory
 *     directly inside `dir`, opened relative to `dir` with O_NOFOLLOW —
 *     never a symlink, "." or "..";
 *   - every name to remove or publish is a plain name (not empty, not "."
 *     or "..", no '/', at most NAME_MAX bytes) that some output format of
 *     ckpt owns (a safetensors file or index, a DCP `.metadata` or
 *     `*.distcp`, a gguf-split part: what a replacement with overwrite may
 *     remove) — never a user's file such as notes.txt or config.json;
 *   - every file to publish still in the stage is a regular file there
 *     (not a symlink, FIFO, device or directory), and nothing to remove or
 *     replace is a directory.
 * What it does.  Under an exclusive lock on `dir`: removes the old files,
 * renames the new ones out of the stage, removes the stage and the journal,
 * and fsyncs `dir` — every call relative to `dir`'s descriptor (unlinkat,
 * renameat), so nothing outside `dir` is ever named.  Finishing is
 * idempotent: a crash during it is finished by the next call.
 * What it refuses.  A journal breaking any rule fails with
 * CKPT_E_INCOMPLETE naming the journal, the rule and the byte offset of the
 * field at fault (err->offset), and nothing of it is done; if no ckpt
 * commit was interrupted there, the file came with the directory and may be
 * deleted.  A directory a live writer holds fails with CKPT_E_LOCKED naming
 * its pid.  A failed system call gives its status (CKPT_E_IO, …).
 *
 * `dir` names the directory; a file's path stands for the directory holding
 * it.  With CKPT_RECOVER_CHECK the journal is validated and nothing changes
 * (no lock either).  *found (may be NULL) is set to 1 when `dir` held a
 * journal that was finished (with CKPT_RECOVER_CHECK: that would be), and
 * to 0 when it held none, which is success.
 */
CKPT_API ckpt_status ckpt_commit_recover(const char *dir, unsigned flags, int *found, ckpt_error *err);

/* ------------------------------------------------------------------------ */
/* Verification                                                             */
/* ------------------------------------------------------------------------ */

/*
 * Checks a checkpoint.  Opening already checked its structure (every offset
 * and size, index ↔ shards, each tensor present exactly once, every file
 * complete); this reads every byte that a checksum the files record covers
 * and compares:
 *   - ckpt's own XXH3-64 digests (CKPT_CHECKSUM_METADATA_KEY, written by
 *     ckpt_convert_plan with options->checksums): each tensor's, and the header's;
 *   - the CRC-32 of every ZIP member: every record of a torch.save file
 *     (storages, data.pkl, …) and of the torch.save items in DCP files,
 *     every member of an .npz archive — inflating DEFLATE members, whose
 *     declared size must be what their stream gives.
 * A mismatch fails with CKPT_E_CHECKSUM naming the file, the tensor and
 * (ZIP) the member; a DEFLATE stream that contradicts its member's size,
 * with CKPT_D_ZIP_INVALID; a checksum map naming a tensor its file does not
 * hold, with CKPT_D_INDEX_MISMATCH.  GGUF, plain safetensors and DCP files
 * written with safetensors serialization record none: nothing to compare.
 * Files whose source states their SHA-256 — an hf:// repo's LFS files, by
 * the Hub's API (or, offline, by the blob names of the Hub's cache, which
 * are those hashes) — are read whole and hashed: a cached snapshot is
 * checked against the Hub's hashes (CKPT_E_CHECKSUM naming the file).
 * `report` (may be NULL) receives what was checked, filled up to its
 * `size`, zeros when nothing was recorded: `ckpt verify` prints these counts
 * in its summary and as the "checksums" of its --json; Python's
 * Checkpoint.verify(report=True) returns them as a dict.  `options` may be
 * NULL (no progress).
 */
typedef struct ckpt_verify_options {
    size_t size; /* sizeof(ckpt_verify_options), set by ckpt_verify_options_init */
    /* Bytes read and compared so far, of those the checksums cover;
     * non-zero cancels (CKPT_E_CANCELLED).  NULL: none. */
    ckpt_progress_fn progress;
    void *user;
} ckpt_verify_options;

CKPT_API void ckpt_verify_options_init_sized(ckpt_verify_options *options, size_t size);
static inline void ckpt_verify_options_init(ckpt_verify_options *options) {
    ckpt_verify_options_init_sized(options, sizeof *options);
}

/* What ckpt_verify checked.  The caller sets `size` to its
 * sizeof(ckpt_verify_report) and the library fills that many bytes: a
 * caller built against an older header (no chunk_digests) gets the fields
 * it knows, one built against a newer header zeros in the fields this
 * library does not know. */
typedef struct ckpt_verify_report {
    size_t size;            /* sizeof(ckpt_verify_report), set by the caller */
    size_t tensor_digests;  /* tensors whose XXH3-64 matched */
    size_t header_digests;  /* files whose header XXH3-64 matched */
    size_t zip_crc32;       /* ZIP members whose CRC-32 (and DEFLATE size) matched */
    uint64_t bytes;         /* bytes those checksums cover, all read */
    size_t tensors;         /* tensors whose bytes they cover */
    size_t file_sha256;     /* files whose SHA-256, as their source states it, matched (an
                               hf:// repo's LFS files: the Hub's hashes; their bytes count in `bytes`) */
    size_t chunk_digests;   /* per-chunk XXH3-64s (CKPT_CHUNK_METADATA_KEY) that matched, each tensor's
                               empty last chunk included; their tensors count in tensor_digests */
} ckpt_verify_report;

CKPT_API ckpt_status ckpt_verify(const ckpt_catalog *catalog, const ckpt_verify_options *options,
                                 ckpt_verify_report *report, ckpt_error *err);

/* ------------------------------------------------------------------------ */
/* Casts                                                                    */
/* ------------------------------------------------------------------------ */

/*
 * Non-zero when ckpt converts `from` to `to`: between any two of F64, F32,
 * F16, BF16 and the five float8 formats; integers to wider integers of the
 * same signedness, unsigned (and BOOL) to wider signed; any dtype to itself;
 * GGUF block types Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K-Q6_K, TQ1_0, TQ2_0 and
 * MXFP4 to F32, F16 and BF16 (dequantization, bit-exact with gguf-py's
 * gguf.quants), and F32, F16, BF16, F64 to Q8_0 and Q4_0 (quantization,
 * likewise) and to Q5_0, Q5_1, Q4_K, Q5_K and Q6_K (quantization bit-exact
 * with ggml's reference quantizers, quantize_row_*_ref, which llama-quantize
 * runs without an importance matrix).  Other block types are refused by
 * name.
 */
CKPT_API int ckpt_can_cast(ckpt_dtype from, ckpt_dtype to);

/*
 * Converts `count` elements (for GGUF block types, a whole number of blocks,
 * as gguf.quants converts them; see ckpt_can_cast), bit for bit as torch's
 * Tensor.to() on CPU for
 * every value that is not a NaN: floats go through float32 (as torch does,
 * so float64 → bfloat16 rounds twice), round to nearest even; float8_e4m3fn
 * saturates to ±448 (infinities included), float8_e5m2 overflows to
 * infinity, the *fnuz formats turn overflow, infinity and NaN into their
 * one NaN and have no −0, float8_e8m0fnu rounds up from the guard bit.  A
 * NaN stays a NaN of the same sign (torch's own NaN payloads differ between
 * its scalar and vector code, see docs/CASTS.md).  `src` and `dst` need no
 * alignment and must not overlap.  SIMD kernels are chosen at run time
 * (CKPT_SIMD=scalar|avx2|avx512 in the environment caps the choice).
 */
CKPT_API ckpt_status ckpt_cast(ckpt_dtype from, const void *src, ckpt_dtype to, void *dst, uint64_t count,
                               ckpt_error *err);

/* ------------------------------------------------------------------------ */
/* Plans: what to load, and how                                             */
/* ------------------------------------------------------------------------ */

/*
 * A plan lists the tensors of a catalog to load and, for each, a new name,
 * a slice, a dtype and an axis order.  It starts with every tensor,
 * unchanged.  Rules name tensors by a *pattern* on their name in the
 * checkpoint (never the new name): a glob where `*` matches any run of
 * characters (dots included) and `?` one character; NULL or "*" matches
 * every tensor.  Each rule applies at once to the tensors selected when it
 * is added, in the order rules are added: a tensor's data becomes
 *
 *     permute(cast(slice(source)))
 *
 * with slices given in the source's dimensions.  Nothing is read until
 * ckpt_load (or ckpt_convert_plan).  A plan keeps a pointer to its catalog,
 * which must outlive it.  A plan is used from one thread at a time.
 */
typedef struct ckpt_plan ckpt_plan;

CKPT_API ckpt_status ckpt_plan_create(ckpt_catalog *catalog, ckpt_plan **out, ckpt_error *err);

/* Releases a plan and the buffers the library allocated for it (not those
 * taken with ckpt_plan_take).  Accepts NULL. */
CKPT_API void ckpt_plan_free(ckpt_plan *plan);

/*
 * Every rule below reports a pattern that matches no tensor (NULL and "*"
 * aside) with CKPT_E_NO_MATCH naming it, as git reports a pathspec that
 * matched no file, and loading or converting a plan that selects nothing
 * fails the same way — unless the plan ignores unmatched patterns.  A rule
 * whose pattern names one tensor (no unescaped `*`, `?` or `[`; a
 * backslash makes the next character literal, so any name can be given
 * exactly) fails on a tensor it cannot apply to; a broad pattern leaves
 * such tensors as they are and counts them (ckpt_plan_last_rule).
 */
#define CKPT_PLAN_IGNORE_UNMATCHED 1u

/* Sets CKPT_PLAN_* flags. */
CKPT_API void ckpt_plan_set_flags(ckpt_plan *plan, unsigned flags);

/* The last rule's tensors: those its pattern matched, and those of them it
 * left as they are (another rank, not a float, no such axis). */
CKPT_API void ckpt_plan_last_rule(const ckpt_plan *plan, size_t *matched, size_t *skipped);

/*
 * Why the last rule left tensors as they are, by reason: group `i` (from 0)
 * holds the returned number of tensors (0 past the last group); *reason
 * receives a phrase that follows that number — "with fewer than 2 axes
 * (quantization keeps vectors as they are, as convert_hf_to_gguf does)",
 * "with a dtype that is not a float", "without that dimension", "with
 * another number of axes", … — and *example the first such tensor's name
 * (in the checkpoint); either pointer may be NULL.  Strings live as long
 * as the plan.
 */
CKPT_API size_t ckpt_plan_last_rule_skipped(const ckpt_plan *plan, size_t i, const char **reason,
                                            const char **example);

/* Keeps only tensors matching `pattern`: the first call replaces "every
 * tensor" by the matches, later calls add their matches. */
CKPT_API ckpt_status ckpt_plan_select(ckpt_plan *plan, const char *pattern, ckpt_error *err);

/* Drops the selected tensors matching `pattern`. */
CKPT_API ckpt_status ckpt_plan_exclude(ckpt_plan *plan, const char *pattern, ckpt_error *err);

/*
 * Renames selected tensors.  With a `*` in `from`, a whole-name glob whose
 * `*` captures replace the `*` of `to` in order ("layers.*.attn.*" →
 * "h.*.attention.*").  Without one, a prefix: `from` ending in "." strips
 * or replaces that prefix ("model." → ""); otherwise it matches the name
 * itself or the name followed by "." (so "encoder" renames "encoder.x" but
 * not "encoders.x").  Renames apply to the current name, in order.
 */
CKPT_API ckpt_status ckpt_plan_rename(ckpt_plan *plan, const char *from, const char *to, ckpt_error *err);

/*
 * Casts selected floating-point tensors matching `pattern` to `dtype` (a
 * float dtype; other tensors are left as they are) — or, when `dtype` is an
 * integer type, widens matching integer tensors.  Fails with
 * CKPT_E_INVALID_ARGUMENT naming a tensor that cannot be cast.
 * GGUF block types: a float `dtype` dequantizes matching block tensors
 * (CKPT_D_UNSUPPORTED_DTYPE names a type ckpt does not dequantize);
 * CKPT_Q8_0 or CKPT_Q4_0 quantizes matching float tensors of two or more
 * axes whose rows are whole blocks (vectors stay, as convert_hf_to_gguf
 * keeps them).  Slices of a block tensor's last axis keep whole blocks and
 * permutations keep its last axis in place (else CKPT_E_INVALID_ARGUMENT).
 */
CKPT_API ckpt_status ckpt_plan_cast(ckpt_plan *plan, const char *pattern, ckpt_dtype dtype, ckpt_error *err);

/*
 * Fits the plan's GGUF block types to output format `format` (a
 * ckpt_format, as ckpt_destination_resolve gives it): a selected tensor
 * left in its source's block type (Q4_0, Q8_0, …) that the format cannot
 * hold (safetensors, torch, NumPy, Flax: all but GGUF) becomes F32, which
 * holds its values exactly — unless the last ckpt_plan_cast rule matching
 * it asked for a block type (applied or not: ckpt does not requantize),
 * which is left for the writer to refuse by tensor (CKPT_D_UNSUPPORTED_DTYPE,
 * nothing written) rather than written unquantized.  Tensors a rule cast
 * to a float dtype keep it.  ckpt_convert_plan and
 * ckpt_convert_plan_preview call it for their destination's format; call
 * it yourself before a collective conversion.  CKPT_E_INVALID_ARGUMENT for
 * a format ckpt does not write; CKPT_D_UNSUPPORTED_DTYPE naming a tensor
 * of a block type ckpt does not dequantize.
 */
CKPT_API ckpt_status ckpt_plan_dequantize_for(ckpt_plan *plan, ckpt_format format, ckpt_error *err);

/*
 * Keeps elements [start, stop) of dimension `dim` (negative counts from the
 * last) of matching tensors, within any earlier slice of that dimension
 * (the range is relative to it).  A tensor without that dimension, a
 * range past its size, or a packed sub-byte tensor (F4, F6: loaded whole
 * only) fails naming the tensor.
 */
CKPT_API ckpt_status ckpt_plan_slice(ckpt_plan *plan, const char *pattern, int dim, uint64_t start, uint64_t stop,
                                     ckpt_error *err);

/*
 * Tensor-parallel split: keeps part `rank` of `parts` of dimension `dim`,
 * as torch.tensor_split / numpy.array_split cut (the first size % parts
 * parts are one longer; uneven sizes are allowed).
 */
CKPT_API ckpt_status ckpt_plan_split(ckpt_plan *plan, const char *pattern, int dim, uint64_t rank, uint64_t parts,
                                     ckpt_error *err);

/*
 * Reorders the axes of matching tensors: output axis i is input axis
 * perm[i] (numpy.transpose / torch.permute).  Matching tensors must have
 * `ndim` axes.  Permutations compose.
 */
CKPT_API ckpt_status ckpt_plan_permute(ckpt_plan *plan, const char *pattern, uint32_t ndim, const uint32_t *perm,
                                       ckpt_error *err);

/* Transposes the matching tensors that have exactly two axes (dense
 * kernels, (out, in) ↔ (in, out)); others are left as they are (and
 * counted), or refused when the pattern names them.  Packed sub-byte
 * tensors (F4, F6) are refused here and in the other permutations. */
CKPT_API ckpt_status ckpt_plan_transpose(ckpt_plan *plan, const char *pattern, ckpt_error *err);

/*
 * Converts a layout named by letters, e.g. "OIHW" → "HWIO" (torch conv
 * kernels to TensorFlow/Flax ones), "OIDHW" → "DHWIO", "OI" → "IO": both
 * strings hold the same distinct letters; matching tensors with that many
 * axes are permuted, others are left as they are.
 */
CKPT_API ckpt_status ckpt_plan_layout(ckpt_plan *plan, const char *pattern, const char *from, const char *to,
                                      ckpt_error *err);

/* One tensor of a plan.  Pointers live as long as the plan. */
typedef struct ckpt_plan_item {
    const char *name;               /* the name after renames              */
    const ckpt_tensor_info *source; /* the tensor in the catalog           */
    ckpt_dtype dtype;               /* after the cast                      */
    uint32_t ndim;
    const uint64_t *shape;          /* after slicing and permutation       */
    uint64_t numel;
    uint64_t nbytes;
    const uint64_t *slice_start;    /* per source axis: first element kept */
    const uint64_t *slice_count;    /* per source axis: elements kept      */
    const uint32_t *perm;           /* output axis i is source axis perm[i] */
    /* After ckpt_load: the tensor's data (dense, row-major) — the caller's
     * buffer, a buffer the library allocated, or a read-only view. */
    void *data;
    uint8_t is_view;   /* data points into a mapping of the file: 1 read-only, 2 private (writable) */
    uint8_t transform; /* non-zero when loading converts bytes (cast, axis order, byte order) */
} ckpt_plan_item;

/* Number of selected tensors, and the i-th (in catalog order); indexes hold
 * until the selection changes. */
CKPT_API size_t ckpt_plan_count(const ckpt_plan *plan);
CKPT_API const ckpt_plan_item *ckpt_plan_item_at(const ckpt_plan *plan, size_t i);

/* The selected tensor with this (new) name and its index, or NULL. */
CKPT_API const ckpt_plan_item *ckpt_plan_find(const ckpt_plan *plan, const char *name, size_t *index);

/*
 * An object tree of the plan's catalog (the schema of
 * ckpt_catalog_tree_json; NULL: the catalog's own) as the plan's output
 * has it — what a conversion records: each tensor under its new name (a
 * name the catalog lacks but its metadata maps to one it has, as the hub
 * records tied weights written once, `removed → kept`, under the kept
 * tensor's); those the plan drops taken out of dicts (null in lists and
 * tuples); with
 * select or exclude rules, a dict entry whose tensors the plan all drops
 * gone with them, and an entry holding no tensor kept only when the rules,
 * applied to its dotted name, keep it.  `tree_json` may be a tree an
 * output's metadata records (a converted torch file's "ckpt.torch_tree"),
 * naming the catalog's tensors.  *json is malloc'ed (release it with
 * ckpt_free), or NULL when there is no tree; JSON nested deeper than the
 * library reads is given back as it is.
 */
CKPT_API ckpt_status ckpt_plan_tree_json(const ckpt_plan *plan, const char *tree_json, char **json, ckpt_error *err);

/*
 * The catalog's object tree as the plan's output has it (what
 * ckpt_plan_tree_json gives with no tree_json, as values): *tree is NULL
 * when the catalog has none.  Each call makes the parts the plan changes
 * anew in the plan's memory, which holds them until ckpt_plan_free: call
 * it once the rules are set.  CKPT_E_NO_MEMORY.
 */
CKPT_API ckpt_status ckpt_plan_tree(ckpt_plan *plan, const ckpt_value **tree, ckpt_error *err);

/*
 * Loads item i into the caller's `buffer` (any alignment) of `capacity`
 * bytes, which must hold item->nbytes.  Without a buffer, ckpt_load
 * allocates one (64-byte aligned) or, with options->views, gives a view.
 * GPU memory as the destination: ckpt_plan_set_device_buffer
 * (<ckpt_device.h>).
 */
CKPT_API ckpt_status ckpt_plan_set_buffer(ckpt_plan *plan, size_t i, void *buffer, uint64_t capacity,
                                          ckpt_error *err);

/* After ckpt_load: takes ownership of the buffer the library allocated for
 * item i (release it with ckpt_free); NULL for a caller buffer or a view. */
CKPT_API void *ckpt_plan_take(ckpt_plan *plan, size_t i);

/* Releases a buffer from ckpt_plan_take.  Accepts NULL. */
CKPT_API void ckpt_free(void *buffer);

/* ---- match report ------------------------------------------------------- */

/* What a model skeleton expects of one tensor. */
typedef struct ckpt_expected {
    const char *name;
    ckpt_dtype dtype;     /* CKPT_DTYPE_INVALID: any dtype */
    uint32_t ndim;
    const uint64_t *shape;
} ckpt_expected;

typedef enum ckpt_mismatch {
    CKPT_MATCH_MISSING = 1,    /* expected, not in the plan              */
    CKPT_MATCH_UNEXPECTED = 2, /* in the plan, not expected              */
    CKPT_MATCH_SHAPE = 3,      /* both, with different shapes            */
    CKPT_MATCH_DTYPE = 4       /* both, same shape, different dtypes     */
} ckpt_mismatch;

typedef struct ckpt_match_entry {
    ckpt_mismatch kind;
    const char *name;
    size_t expected; /* index into the expected array, or SIZE_MAX       */
    size_t item;     /* index of the plan item (before pruning), or SIZE_MAX */
} ckpt_match_entry;

#define CKPT_MATCH_CAST 1u  /* cast float tensors to the expected float dtype instead of reporting them */
#define CKPT_MATCH_PRUNE 2u /* then drop unexpected and mismatched tensors from the plan */

/*
 * Compares the plan (names after renames, shapes after slices and
 * permutations, dtypes after casts) with what a model expects, reading no
 * data.  *entries (valid until the next match or the plan's release) lists
 * the differences: missing in expected order, then unexpected and
 * mismatched in plan order; *count is 0 when everything matches.
 */
CKPT_API ckpt_status ckpt_plan_match(ckpt_plan *plan, const ckpt_expected *expected, size_t expected_count,
                                     unsigned flags, const ckpt_match_entry **entries, size_t *count,
                                     ckpt_error *err);

/* ------------------------------------------------------------------------ */
/* Loading: the engine                                                      */
/* ------------------------------------------------------------------------ */

typedef struct ckpt_load_options {
    size_t size;          /* sizeof(ckpt_load_options), set by ckpt_load_options_init */
    unsigned threads;     /* 0: one per online CPU, plus up to 16 more (twice the CPUs) when
                             reading with O_DIRECT, which waits on the disk more than the CPU */
    uint64_t chunk_bytes; /* bytes per task and per bounce buffer; 0: 8 MiB, smaller when
                             many threads would take the ring past 48 MiB (1 MiB at least).
                             Plain copies of O_DIRECT files into memory stream through
                             the buffer in 1 MiB slots, in tasks of 4 chunks */
    int io_uring;         /* 0: use io_uring when the kernel offers it; -1: never      */
    /* Tensors needing no transform and no buffer become zero-copy views of
     * the file (not on network file systems): CKPT_VIEWS_SHARED, read-only
     * views of the catalog's mapping; CKPT_VIEWS_PRIVATE, writable,
     * copy-on-write views of private mappings with prefetch (see
     * ckpt_catalog_map_file), which live as long as the plan; 0: none.
     * Views read nothing, so their ZIP CRC-32s are not checked (see
     * skip_crc_check); a view of a file truncated meanwhile raises SIGBUS
     * where it is touched (see ckpt_catalog_view): 0 reads every tensor
     * into memory of its own. */
    int views;
    ckpt_progress_fn progress; /* bytes loaded so far (views count as loaded); non-zero
                                * cancels (may be NULL)                                  */
    void *user;
    /* Called once per plan item as soon as all its bytes are in place (a
     * view: before any read), with the item's index, from the thread that
     * finished it: several threads may call at once, in no particular
     * order.  Lets a caller use each tensor (hash it, copy it to a device)
     * while the others are still being read.  Non-zero cancels.  The data
     * stays valid until the plan is released, or until ckpt_load fails
     * (library buffers are released then).  ckpt_load_collective, when the
     * ranks broadcast replicated bytes, hands every item over once the
     * broadcast is done.  May be NULL. */
    int (*item_done)(size_t item, void *user);
    void *item_done_user;
    /*
     * Non-zero: do not check the CRC-32s of ZIP members (torch.save files,
     * the torch.save items of DCP files, .npz archives).  By default a load
     * checks the CRC-32 of every member whose bytes it reads whole, as they
     * stream (zlib's crc32 beside the copy): each tensor read whole (no
     * slice) into memory — a library buffer or the caller's — adds the
     * CRC-32s of the bytes it read, and once every tensor of the plan that
     * lies in a member is in place, the member is checked if together (with
     * the .npy header of an .npz member, read at open) they cover it.  So a
     * torch storage shared by several tensors is checked when the last of
     * them is in place, before that one's item_done (the others' fired
     * already); a storage with bytes no tensor shows, slices, tensors
     * assembled from several members (a DCP tensor several ranks saved),
     * and collective loads' shares go unchecked.  A DEFLATE member read whole is
     * inflated to its end, and its declared size checked too.  Views
     * (options->views) cannot be checked: no byte passes through the
     * library (ckpt_verify checks every member).  A mismatch fails with
     * CKPT_E_CHECKSUM naming the file, the member and the tensor; a declared
     * size the DEFLATE stream contradicts, with CKPT_D_ZIP_INVALID.
     */
    int skip_crc_check;
} ckpt_load_options;

/* Fills the first `size` bytes of options with the defaults, and `size`
 * with `size`: the caller's sizeof, so that a library newer than the
 * caller's header writes only the fields the caller has. */
#define CKPT_VIEWS_SHARED 1
#define CKPT_VIEWS_PRIVATE 2

CKPT_API void ckpt_load_options_init_sized(ckpt_load_options *options, size_t size);
static inline void ckpt_load_options_init(ckpt_load_options *options) {
    ckpt_load_options_init_sized(options, sizeof *options);
}

/*
 * Loads every selected tensor of the plan into its destination.  Threads
 * read in chunks with pread (or io_uring, or O_DIRECT): straight into the
 * destination when bytes need no conversion, through a bounded ring of
 * aligned bounce buffers (threads × chunk_bytes) when they do.  Slices read
 * only their rows.  Memory beyond the destinations is that ring, whatever
 * the checkpoint's size (a torch tensor saved as a non-contiguous view and
 * then sliced or permuted is gathered whole first).  On failure or
 * cancellation, buffers the library allocated are released and caller
 * buffers hold partial data.  Items keep their data until the plan is
 * released; ckpt_load may be called again (it reloads).
 *
 * Items given device memory (ckpt_plan_set_device_buffer, <ckpt_device.h>)
 * are read into the device's ring of pinned host slots and copied to the
 * device from there; ckpt_load returns once every copy has completed.
 */
CKPT_API ckpt_status ckpt_load(ckpt_plan *plan, const ckpt_load_options *options, ckpt_error *err);

/* What the last ckpt_load did. */
typedef struct ckpt_load_stats {
    uint64_t bytes_needed; /* bytes of source data the plan needs                   */
    uint64_t bytes_read;   /* bytes read from files (≥ needed: alignment, gathers)  */
    uint64_t reads;        /* read requests issued                                  */
    uint64_t tasks;
    unsigned threads;
    uint64_t ring_bytes;   /* bounce memory allocated                               */
    int direct;            /* O_DIRECT was used                                     */
    int io_uring;          /* io_uring was used                                     */
    uint64_t views;        /* tensors given as views                                */
} ckpt_load_stats;

CKPT_API void ckpt_plan_stats(const ckpt_plan *plan, ckpt_load_stats *stats);

/*
 * Writes the plan's tensors (new names, slices, dtypes, axis orders) as a
 * new checkpoint at `dst_path` (one file, split parts or shards, per
 * `options`; see ckpt_destination_resolve), keeping the source's metadata
 * and its tensor order for packing.  A plan with no rule converts the whole
 * checkpoint:
 *
 *     ckpt_plan *plan;
 *     if (ckpt_plan_create(catalog, &plan, &err) == CKPT_OK)
 *         st = ckpt_convert_plan(plan, "out/", &options, &err);
 *     ckpt_plan_free(plan);
 *
 * Streams through the bounce ring: memory use does not depend on the
 * checkpoint's size, and no whole tensor is held unless a permuted tensor's
 * source is a torch non-contiguous view.  Tensors needing nothing are
 * copied by the kernel.  options->progress reports the bytes written and
 * may cancel.
 */
CKPT_API ckpt_status ckpt_convert_plan(ckpt_plan *plan, const char *dst_path, const ckpt_writer_options *options,
                                       ckpt_error *err);

/*
 * A dry run of ckpt_convert_plan: the writer it would write with, planned
 * after every rule and committed as a dry run (options->dry_run is
 * implied), having written, copied, replaced and locked nothing.  It fails
 * as the conversion would before its first byte of data (an existing
 * checkpoint without overwrite, a dtype the output format cannot hold,
 * views the hub refuses).  Read it through the writer's accessors
 * (ckpt_writer_path, _format, _is_directory, _open_path, _file_count,
 * _file_path, _file_size, _name_at, _tensor_info_at, _tensor_part,
 * _total_bytes); writer tensor i is plan item i (ckpt_plan_item_at: its
 * source tensor).  Release it with ckpt_writer_free.  `ckpt convert
 * --dry-run` prints it (--json: as docs/CLI.md shows), and Python's
 * ckpt.convert(..., dry_run=True) returns it as a dict.
 */
CKPT_API ckpt_status ckpt_convert_plan_preview(ckpt_plan *plan, const char *dst_path,
                                               const ckpt_writer_options *options, ckpt_writer **writer,
                                               ckpt_error *err);

#ifdef __cplusplus
}
#endif

#endif /* CKPT_H */
