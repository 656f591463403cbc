/*
 * gguf.h — GGUF, the format of ggml and llama.cpp (ggml's docs/gguf.md; the
 * `gguf` package on PyPI is the reference ckpt is tested against).
 *
 *   "GGUF"  u32 version (2 or 3)  u64 tensor_count  u64 kv_count
 *   kv_count × { string key, u32 type, value }
 *   tensor_count × { string name, u32 n_dims, n_dims × u64 (innermost
 *                    first), u32 ggml type, u64 offset (from the data) }
 *   padding to general.alignment (32), then the data: each tensor at its
 *   offset, padded to the alignment.
 *   string = u64 length + bytes; array = u32 element type + u64 count +
 *   elements (arrays may hold arrays).  A file written on a big-endian
 *   machine stores every number big-endian (its version then reads as
 *   0x03000000 little-endian).
 *
 * Reading is the format table in gguf.c; writing is gguf_write.c's output
 * format (header bytes and tensor offsets, as gguf-py's GGUFWriter lays
 * them out).
 */
#ifndef CKPT_FORMATS_GGUF_H
#define CKPT_FORMATS_GGUF_H

#include "../base/base.h"
#include "ckpt_gguf.h"

#define CKPT__GGUF_MAX_DIMS 4            /* ggml's GGML_MAX_DIMS */
#define CKPT__GGUF_DEFAULT_ALIGNMENT 32
#define CKPT__GGUF_MAX_NESTING 16        /* arrays of arrays, this deep at most */

/* "u8" ... "f64" for a GGUF value type number; NULL for another. */

/* The tag (ckpt__encoded.format) of a value in GGUF's encoding: a reader's
 * key-value kept as its type (u32) and payload, little-endian, exactly as
 * a GGUF file holds them after the key; a GGUF output copies it. */
CKPT__HIDDEN extern const char ckpt__gguf_encoding[];
CKPT__HIDDEN const char *ckpt__gguf_type_name(uint32_t type);
/* GGUF's value types a writer of arrays names (gguf.h's others: by name). */
enum { CKPT__GGUF_I32 = 5, CKPT__GGUF_F32 = 6, CKPT__GGUF_STRING = 8, CKPT__GGUF_ARRAY = 9 };
/* The typed JSON ({"gguf_type": ...}) of a value in GGUF's encoding
 * (ckpt__encoded.json); malloc'ed, NULL when out of memory. */
CKPT__HIDDEN char *ckpt__gguf_kv_json(const ckpt__encoded *value);


/*
 * Appends the binary key-value pair for a metadata entry: `value` is a
 * typed JSON value ({"gguf_type": ...}, see ckpt_kv) when `typed` says so
 * (it starts with '{' and parses as one), else a string.  On a malformed
 * typed value returns CKPT__D(GGUF_KV_TYPE) with a reason in `why`.
 */
CKPT__HIDDEN ckpt_status ckpt__gguf_encode_kv(ckpt__buf *out, const char *key, const char *value, char *why,
                                              size_t why_len);

/*
 * The entries of a metadata_json object (writer options) as what a writer
 * stores: a string as itself, typed JSON as itself, other values typed as
 * gguf-py types them.  Arrays and strings are malloc'ed (free each).
 */
CKPT__HIDDEN ckpt_status ckpt__gguf_metadata_pairs(const char *json_text, char ***keys, char ***values, size_t *count,
                                                   char *why, size_t why_len);

/* One tensor of an output file. */
typedef struct ckpt__gguf_out_tensor {
    const char *name;
    ckpt_dtype dtype;
    uint32_t ndim;
    const uint64_t *shape; /* outermost first */
    uint64_t nbytes;
    uint64_t offset;       /* out: byte offset in the file */
} ckpt__gguf_out_tensor;

/* "stem-00002-of-00005.gguf" beside `path` (whose ".gguf" is dropped);
 * malloc'ed. */
CKPT__HIDDEN char *ckpt__gguf_split_path(const char *path, size_t index, size_t count);

/* Whether `name` (a base name) looks like a part "-NNNNN-of-NNNNN.gguf". */
CKPT__HIDDEN bool ckpt__gguf_is_split_name(const char *name);

#endif
