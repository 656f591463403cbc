/*
 * safetensors.h — the safetensors file format.
 *
 *   u64 LE N | N bytes of UTF-8 JSON header | data buffer
 *
 * The header maps tensor names to {"dtype", "shape", "data_offsets":[b, e]}
 * (offsets relative to the data buffer) plus an optional "__metadata__"
 * string → string map.  Validation follows huggingface/safetensors
 * (safetensors/src/tensor.rs, SafeTensors::read_metadata and
 * Metadata::validate), plus duplicate-name detection.
 */
#ifndef CKPT_FORMATS_SAFETENSORS_H
#define CKPT_FORMATS_SAFETENSORS_H

#include "../base/base.h"
#include "../base/json.h"
#include "../io/source.h"

#define CKPT__ST_MAX_HEADER 100000000ULL

typedef struct ckpt__st_tensor {
    const char *name; /* inside the header text */
    ckpt_dtype dtype;
    uint32_t ndim;
    uint64_t *shape; /* arena */
    uint64_t numel, nbytes;
    uint64_t begin, end;    /* relative to the data buffer */
    uint64_t header_offset; /* byte offset of its entry in the file */
} ckpt__st_tensor;

typedef struct ckpt__st_header {
    uint64_t data_start;      /* 8 + N */
    size_t count;
    ckpt__st_tensor *tensors; /* malloc'ed, sorted by data offsets */
    size_t meta_count;
    const char **meta_keys;   /* arena */
    const char **meta_values; /* arena */
} ckpt__st_header;

/*
 * Validates a safetensors header.  `header` holds the N header bytes that
 * follow the 8-byte length of a file of `file_size` bytes (the caller has
 * checked the length rules: see ckpt__st_read_header).  It is parsed in
 * place: names point into it, so it must live as long as `out`; shapes go
 * to `arena`.  Errors name `path`, the tensor and the byte offset.
 */
CKPT__HIDDEN ckpt_status ckpt__st_parse_header(char *header, uint64_t n, uint64_t file_size,
                                               const char *path, ckpt__arena *arena,
                                               ckpt__st_header *out, ckpt_error *err);

/* Reads and validates the header of an open file. */
CKPT__HIDDEN ckpt_status ckpt__st_read_header(ckpt__source *src, ckpt__arena *arena, ckpt__st_header *out,
                                              ckpt_error *err);

CKPT__HIDDEN void ckpt__st_header_free(ckpt__st_header *header);

/* One tensor to write: the input of ckpt__st_layout. */
typedef struct ckpt__st_out_tensor {
    const char *name;
    ckpt_dtype dtype;
    uint32_t ndim;
    const uint64_t *shape;
    uint64_t nbytes;
    uint64_t begin; /* set by ckpt__st_layout: offset in the data buffer */
    size_t id;      /* the caller's, carried through the sort */
} ckpt__st_out_tensor;

/*
 * Lays out tensors as safetensors' writer does — sorts `tensors` in place by
 * dtype (descending) then name (bytewise) and assigns consecutive offsets —
 * and renders the header: compact JSON, "__metadata__" first, padded with
 * spaces to a multiple of 8, preceded by its u64 length.  `header` receives
 * the 8 + N bytes that precede the data.  CKPT_E_LIMIT when N would pass
 * CKPT__ST_MAX_HEADER (safetensors refuses such a file), CKPT__D(SHAPE_OVERFLOW)
 * when the data passes 2^64 bytes, CKPT_E_NO_MEMORY.
 */
CKPT__HIDDEN ckpt_status ckpt__st_layout(ckpt__st_out_tensor *tensors, size_t count,
                                         const char *const *meta_keys,
                                         const char *const *meta_values, size_t meta_count,
                                         ckpt__buf *header, uint64_t *data_size);

#endif
