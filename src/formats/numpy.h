/*
 * numpy.h — NumPy's array files (numpy/lib/_format_impl.py) and the dtype
 * names NumPy and Flax write.
 *
 * A .npy file is
 *
 *   "\x93NUMPY" major minor           6 + 2 bytes; versions 1.0, 2.0, 3.0
 *   header length                     u16 LE (1.0) or u32 LE (2.0, 3.0)
 *   header                            a Python dict literal, ASCII (1.0,
 *                                     2.0) or UTF-8 (3.0), padded with
 *                                     spaces and ended by '\n' so that the
 *                                     data starts on a 64-byte boundary
 *                                     (16 before NumPy 1.14)
 *   data                              shape × itemsize bytes, row-major, or
 *                                     column-major with fortran_order
 *
 * The dict has exactly the keys 'descr' (a dtype string such as '<f4';
 * a list for structured dtypes, which ckpt refuses), 'fortran_order' (True
 * or False) and 'shape' (a tuple of ints).  np.save writes ml_dtypes'
 * types by their dtype.str: bfloat16 as '<V2' (the only two-byte type
 * NumPy writes as raw bytes, read by ckpt as bfloat16), float8_e5m2 as
 * '<f1' (which np.load itself cannot read; read by ckpt as float8_e5m2),
 * and every other 8-bit ml_dtypes type as '<V1', which cannot be told
 * apart and is refused.  Writers that spell the dtype by name
 * ('bfloat16', 'float8_e4m3fn', as np.load accepts with ml_dtypes loaded)
 * are read exactly.
 *
 * A .npz file is a ZIP archive of "<key>.npy" members, stored (np.savez)
 * or DEFLATE-compressed (np.savez_compressed).
 */
#ifndef CKPT_FORMATS_NUMPY_H
#define CKPT_FORMATS_NUMPY_H

#include "../base/base.h"

/* Longest header ckpt reads (NumPy's own default limit is 10,000 bytes). */
#define CKPT__NPY_MAX_HEADER (1u << 20)

/* The magic string and the smallest preamble (magic, version, u16 length). */
#define CKPT__NPY_MAGIC "\x93NUMPY"
#define CKPT__NPY_MAGIC_LEN 6
#define CKPT__NPY_PREAMBLE 10

typedef struct ckpt__npy_header {
    ckpt_dtype dtype;
    bool big_endian;   /* '>' byte order on a multi-byte dtype */
    bool fortran;      /* column-major data */
    uint32_t ndim;
    uint64_t *shape;   /* ndim sizes (arena) */
    uint64_t numel, nbytes;
    uint64_t data_offset; /* from the first byte of the .npy to its data */
} ckpt__npy_header;

/*
 * From the first `n` bytes of a .npy (n ≥ 12 or the whole file): the
 * number of bytes of magic, version, length field and header, i.e. where
 * the data starts.  Errors name `path`, `tensor` and `base` + the offset
 * in the .npy (base: where the .npy starts in its file, or -1 when the
 * bytes are inside a compressed record).
 */
CKPT__HIDDEN ckpt_status ckpt__npy_preamble(const unsigned char *head, size_t n, const char *path, const char *tensor,
                                            int64_t base, uint64_t *data_offset, ckpt_error *err);

/*
 * Parses a whole .npy preamble and header (`n` = *data_offset from
 * ckpt__npy_preamble) into *out, the shape in `arena`.  Checks the dict's
 * keys, the dtype, the shape (at most CKPT_MAX_DIMS sizes, no overflow of
 * the byte count).
 */
CKPT__HIDDEN ckpt_status ckpt__npy_parse(const unsigned char *buf, size_t n, const char *path, const char *tensor,
                                         int64_t base, ckpt__arena *arena, ckpt__npy_header *out, ckpt_error *err);

/*
 * The dtype of a NumPy dtype string (descr, '<f4', '|b1', '>i8', and
 * names such as 'float32' or 'bfloat16'); *big_endian is set for '>' on a
 * multi-byte type.  CKPT_DTYPE_INVALID when ckpt has no such dtype; then
 * *why (when not NULL) says why in a few words.
 */
CKPT__HIDDEN ckpt_dtype ckpt__numpy_dtype(const char *descr, bool *big_endian, const char **why);

/* The NumPy name of a dtype as dtype.name spells it ("float32",
 * "bfloat16", "float8_e4m3fn"), or NULL when NumPy (with ml_dtypes) has
 * no such dtype (F4, F6). */
CKPT__HIDDEN const char *ckpt__numpy_name(ckpt_dtype dtype);
/* An output format's `accepts` for NumPy and Flax files: refuses, by
 * name, a dtype NumPy has no name for (F4, F6, GGUF's block types). */
CKPT__HIDDEN ckpt_status ckpt__numpy_accepts(const char *path, const char *name, ckpt_dtype dtype, uint32_t ndim,
                                             const uint64_t *shape, ckpt_error *err);

/* A .npy preamble and header for a row-major array, as
 * numpy.lib.format writes it (keys sorted, room for the first axis to
 * grow, padded to 64 bytes; version 1.0, 2.0 when longer), appended to
 * `out`.  CKPT__D(UNKNOWN_DTYPE) when NumPy has no such dtype. */
CKPT__HIDDEN ckpt_status ckpt__npy_header_write(ckpt__buf *out, ckpt_dtype dtype, uint32_t ndim,
                                                const uint64_t *shape);

/*
 * Element strides (in elements) of a column-major array, into `strides`;
 * false when the layout equals row-major (at most one axis longer than 1,
 * or no elements), so that no strides are needed.
 */
CKPT__HIDDEN bool ckpt__npy_fortran_strides(uint32_t ndim, const uint64_t *shape, int64_t *strides);

#endif
