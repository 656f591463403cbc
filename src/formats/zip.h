/*
 * zip.h — the ZIP container of torch.save files (pytorch
 * caffe2/serialize/inline_container.cc; PKWARE APPNOTE 6.3).
 *
 * ckpt reads the central directory (ZIP64 end records included), checks
 * every offset and size against the file, and resolves each entry's data
 * offset from its local header (whose extra field — torch's alignment
 * padding — differs from the central one).  Stored entries are read in
 * place; DEFLATE entries (re-zipped files) through zlib.  Encrypted,
 * multi-disk and otherwise compressed archives are refused.  Each entry's
 * CRC-32 is declared to the catalog (ckpt__zip_recorded_crc): ckpt_verify
 * checks them all, loads those they read whole (engine.h).
 *
 * It also writes the records, each writer (torch_save.c's miniz layout,
 * npz.c's numpy one) giving the fields in which they differ.
 */
#ifndef CKPT_FORMATS_ZIP_H
#define CKPT_FORMATS_ZIP_H

#include "../base/base.h"
#include "../io/source.h"
#include "format.h"

typedef struct ckpt__zip_entry {
    const char *name;       /* full name, arena */
    uint64_t header_offset; /* local header */
    uint64_t data_offset;   /* first byte of the (stored or compressed) data */
    uint64_t comp_size;
    uint64_t size;
    uint32_t crc32;
    uint16_t method; /* 0 stored, 8 deflate */
} ckpt__zip_entry;

typedef struct ckpt__zip {
    size_t count;
    ckpt__zip_entry *entries; /* malloc'ed, in central-directory order */
    const char *folder;       /* the one top folder, without '/', arena */
    ckpt__name_table names;
} ckpt__zip;

/* Limits that keep a hostile directory from exhausting memory. */
#define CKPT__ZIP_MAX_ENTRIES 10000000u

/* Returns true when the file starts like a ZIP archive ("PK\3\4" or an
 * empty archive's "PK\5\6"). */
CKPT__HIDDEN bool ckpt__zip_sniff(const unsigned char *head, size_t n);

/*
 * Reads the directory of the archive `src`.  When
 * `single_folder` is set, every entry must sit under one top folder (as
 * torch requires), which is returned in out->folder.
 */
CKPT__HIDDEN ckpt_status ckpt__zip_open(ckpt__source *src, bool single_folder,
                                        ckpt__arena *arena, ckpt__zip *out, ckpt_error *err);
CKPT__HIDDEN void ckpt__zip_close(ckpt__zip *zip);

/* The entry with this full name, or NULL. */
CKPT__HIDDEN const ckpt__zip_entry *ckpt__zip_find(const ckpt__zip *zip, const char *name);

/* The entry "<folder>/<relative>", or NULL. */
CKPT__HIDDEN const ckpt__zip_entry *ckpt__zip_find_in_folder(const ckpt__zip *zip, const char *relative);

/*
 * Reads a whole entry into a malloc'ed buffer (NUL-terminated for
 * convenience), inflating DEFLATE entries; a non-zero recorded CRC is
 * checked (torch may record 0).  Entries larger than `limit` bytes are
 * refused with CKPT_E_LIMIT.  For records (data.pkl, version), not for
 * tensor data.
 */
CKPT__HIDDEN ckpt_status ckpt__zip_read_entry(ckpt__source *src, const ckpt__zip_entry *entry, uint64_t limit,
                                              char **data, ckpt_error *err);

/* What an entry's CRC-32 covers, for the catalog (ckpt__cat_add_crc):
 * false when the entry records none — torch.save with compute_crc32 off
 * writes 0, which is then no checksum (a non-empty entry whose CRC-32 is 0
 * goes unchecked; the chance of that is 2^-32). */
CKPT__HIDDEN bool ckpt__zip_recorded_crc(const ckpt__zip_entry *entry, ckpt__recorded_crc *out);

/* The first `n` bytes (at most the entry's size) of an entry's data,
 * inflated when it is DEFLATE (reading only as much as they need), without
 * a CRC check: a member's header (an .npz's .npy headers). */
CKPT__HIDDEN ckpt_status ckpt__zip_read_prefix(ckpt__source *src, const ckpt__zip_entry *entry, uint64_t n, void *out,
                                               ckpt_error *err);

/* ---- writing: the records of the archives ckpt writes (torch_save.c's, npz.c's) ---- */

/* The fixed part of a local header and of a central directory entry, and
 * what ends every archive written: the ZIP64 end of central directory, its
 * locator and the end of central directory. */
enum { CKPT__ZIP_LOCAL_SIZE = 30, CKPT__ZIP_CENTRAL_SIZE = 46, CKPT__ZIP_ENDS_SIZE = 56 + 20 + 22 };

/* A stored member's fields, as its writer fills them (the writers differ
 * only in these: miniz's leaves versions, dates and attributes 0 and
 * gives CRCs and sizes in a descriptor; numpy's zipfile gives them in the
 * header, its sizes in the ZIP64 field).  `size` is both 32-bit sizes
 * (0xFFFFFFFF: in the ZIP64 field), `local` the 32-bit offset of the local
 * header; `made_by`, `external` and `local` are the directory's only.
 * The name and the extra field (`extra_len` bytes) follow, the writer's. */
typedef struct ckpt__zip_header {
    uint16_t made_by, needed, flags, dos_date;
    uint32_t crc, size, external, local;
    uint16_t name_len, extra_len;
} ckpt__zip_header;

/* A local header, or with `in_directory` a central directory entry. */
CKPT__HIDDEN void ckpt__zip_put_header(ckpt__buf *b, const ckpt__zip_header *h, bool in_directory);

/* The end records of an archive of `n` members whose central directory,
 * `cd_size` bytes, starts at `cd_at` (the 32-bit fields 0xFFFF and
 * 0xFFFFFFFF where their values do not fit), `made_by` and `needed` the
 * ZIP64 record's versions. */
CKPT__HIDDEN void ckpt__zip_put_ends(ckpt__buf *b, uint64_t n, uint64_t cd_size, uint64_t cd_at, uint16_t made_by,
                                     uint16_t needed);

#endif
