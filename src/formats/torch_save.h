/*
 * torch_save.h — the bytes torch.save writes, for the formats that write
 * them: the torch output format (torch_write.c) and DCP's items
 * (dcp_write.c).  References: pytorch torch/serialization.py (_save),
 * caffe2/serialize/inline_container.cc (PyTorchStreamWriter) and the miniz
 * it bundles (third_party/miniz-3.0.2: mz_zip_writer_add_mem_ex_v2,
 * mz_zip_writer_finalize_archive), CPython's _pickle.c.
 *
 * An archive is a ZIP file whose records lie in one folder, named after
 * the file (torch.save(obj, "dir/x.pt"): "x"; into a buffer: "archive").
 * Each record is stored (never compressed) with
 *
 *   local header      version 0, flags 0x0808 (sizes in a data descriptor,
 *                     UTF-8 names; 0x0800 for an empty record, which has no
 *                     descriptor), time and date 0, CRC and sizes 0;
 *                     extra fields: ZIP64 (id 1) when the record's size or
 *                     the header's offset reaches 0xFFFFFFFF — the size and
 *                     0 (its compressed size, not yet known to miniz), then
 *                     the offset, each only when it needs one — and "FB"
 *                     padding of 'Z's that puts the data on a 64-byte
 *                     boundary of the archive;
 *   data
 *   data descriptor   PK\7\8, CRC-32, sizes (4 bytes each; 8 when the
 *                     local header has a ZIP64 field);
 *
 * then the central directory (version 0, the same flags, sizes and offset
 * capped at 0xFFFFFFFF with a ZIP64 field holding what was capped), and
 * always a ZIP64 end record (made by 0x031E, needs 45), its locator and
 * the end record.
 */
#ifndef CKPT_FORMATS_TORCH_SAVE_H
#define CKPT_FORMATS_TORCH_SAVE_H

#include "../base/base.h"
#include "../base/cursor.h" /* ckpt__put_le */

/* ---- pickles, as CPython's pickler writes protocol 2 ------------------------ */

CKPT__HIDDEN void ckpt__pkw_op(ckpt__buf *b, unsigned char op);
/* BININT1, BININT2, BININT, else LONG1 with the fewest two's-complement bytes. */
CKPT__HIDDEN void ckpt__pkw_int(ckpt__buf *b, int64_t v);
/* BINUNICODE: protocol 2 writes every str so. */
CKPT__HIDDEN void ckpt__pkw_str(ckpt__buf *b, const char *s, size_t n);
/* GLOBAL "module\nname\n". */
CKPT__HIDDEN void ckpt__pkw_global(ckpt__buf *b, const char *module, const char *name);
/* A tuple of unsigned ints: EMPTY_TUPLE, TUPLE1-3, or MARK … TUPLE (no memo). */
CKPT__HIDDEN void ckpt__pkw_dims(ckpt__buf *b, const uint64_t *v, uint32_t n);
/* BINFLOAT: the double, big-endian. */
CKPT__HIDDEN void ckpt__pkw_float(ckpt__buf *b, double v);
/* A number kept as text (a tree read from JSON): BINFLOAT when it has a
 * fraction or an exponent, else as ckpt__pkw_int; false, writing nothing,
 * for an integer beyond 64 bits. */
CKPT__HIDDEN bool ckpt__pkw_number(ckpt__buf *b, const char *text);
/* Appends, as UTF-8, the str whose latin-1 encoding is these `n` bytes:
 * what protocol 2 pickles bytes as (_codecs.encode(str, 'latin1')). */
CKPT__HIDDEN void ckpt__pkw_latin1(ckpt__buf *text, const char *s, size_t n);
/* Memo: BINPUT / LONG_BINPUT of the next index (returned), and BINGET /
 * LONG_BINGET of one. */
CKPT__HIDDEN uint32_t ckpt__pkw_memo_put(ckpt__buf *b, uint32_t *memo_count);
CKPT__HIDDEN void ckpt__pkw_memo_get(ckpt__buf *b, uint32_t index);

/* ---- dtypes ------------------------------------------------------------------ */

/* One row of torch's dtypes: what the torch reader, the DCP reader and both
 * writers ask, so that a name torch knows means the same dtype everywhere. */
typedef struct ckpt__torch_type {
    ckpt_dtype dtype;
    const char *name;    /* torch.<name> */
    const char *storage; /* its legacy storage class (_rebuild_tensor_v2), or NULL: v3 with UntypedStorage */
    bool pairs;          /* two values an element (float4_e2m1fn_x2): torch's shape counts pairs, ckpt's
                          * values, so readers double the last dimension and writers refuse it */
} ckpt__torch_type;

/* torch's dtype for a ckpt dtype, or NULL when torch.save cannot hold it
 * (GGUF's block types, packed F4/F6). */
CKPT__HIDDEN const ckpt__torch_type *ckpt__torch_type_of(ckpt_dtype dtype);

/* The dtype torch names `name` ("bfloat16", "float8_e4m3fn"; every dtype of
 * torch 2.13), or NULL when torch has none; its dtype is CKPT_DTYPE_INVALID
 * when ckpt has none for it (complex128, qint8…). */
CKPT__HIDDEN const ckpt__torch_type *ckpt__torch_type_named(const char *name);

/* The dtype of a legacy typed storage class ("FloatStorage"), or
 * CKPT_DTYPE_INVALID. */
CKPT__HIDDEN ckpt_dtype ckpt__torch_storage_dtype(const char *storage);

/* torch's name of a dtype ("bfloat16", "float4_e2m1fn_x2"), as str(torch.dtype)
 * writes it after "torch.", or NULL when torch has none. */
CKPT__HIDDEN const char *ckpt__torch_dtype_name(ckpt_dtype dtype);

/* ---- archives ------------------------------------------------------------------ */

enum { CKPT__TORCH_ALIGN = 64 };

typedef struct ckpt__torch_record {
    const char *name; /* in the folder: "data.pkl", "data/0", … */
    uint64_t size;
    uint32_t crc;
    uint64_t local; /* where its local header starts (set by ckpt__torch_records_place) */
    uint64_t data;  /* where its data starts */
} ckpt__torch_record;

/* Places `n` records one after the other from byte `at` (each local
 * header, its data, its descriptor), as miniz does; returns where the
 * central directory starts. */
CKPT__HIDDEN uint64_t ckpt__torch_records_place(const char *folder, ckpt__torch_record *r, size_t n, uint64_t at);
/* A record's local header, padding included (its data follows). */
CKPT__HIDDEN void ckpt__torch_local_header(ckpt__buf *b, const char *folder, const ckpt__torch_record *r);
/* The data descriptor that follows a record's data (none for an empty one). */
CKPT__HIDDEN void ckpt__torch_descriptor(ckpt__buf *b, const ckpt__torch_record *r);
/* The central directory of the records and the end records; `cd_at`:
 * where it starts (ckpt__torch_records_place's result). */
CKPT__HIDDEN void ckpt__torch_directory(ckpt__buf *b, const char *folder, const ckpt__torch_record *r, size_t n,
                                        uint64_t cd_at);
/* Bytes of the central directory and end records. */
CKPT__HIDDEN uint64_t ckpt__torch_directory_size(const char *folder, const ckpt__torch_record *r, size_t n);

/*
 * The record .data/serialization_id that PyTorchStreamWriter writes last
 * (writeSerializationId): 20 decimal digits of the hash of the record
 * names written before it — c10::hash_combine over std::hash<std::string>
 * (libstdc++'s _Hash_bytes) of each name, in the order a libstdc++
 * std::unordered_set iterates them after their insertion in write order —
 * then 20 of c10::hash_combine over the CRC-32 in each data descriptor
 * written (empty records have none), in write order.  Deterministic:
 * the same records give the same id, as with torch.  `out` receives 41
 * bytes (40 digits and a NUL).  CKPT_E_NO_MEMORY, or CKPT_E_LIMIT past
 * billions of records.
 */
CKPT__HIDDEN ckpt_status ckpt__torch_serialization_id(const ckpt__torch_record *r, size_t n, char out[41]);

#endif
