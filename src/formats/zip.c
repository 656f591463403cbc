/* zip.c — see zip.h. */
#include "zip.h"

#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "../base/cursor.h"
#include "../io/file.h"

enum {
    SIG_LOCAL = 0x04034b50,
    SIG_CENTRAL = 0x02014b50,
    SIG_EOCD = 0x06054b50,
    SIG_ZIP64_LOCATOR = 0x07064b50,
    SIG_ZIP64_EOCD = 0x06064b50,
    EOCD_SIZE = 22,
    LOCATOR_SIZE = 20,
    ZIP64_EOCD_SIZE = 56,
    CENTRAL_SIZE = CKPT__ZIP_CENTRAL_SIZE,
    LOCAL_SIZE = CKPT__ZIP_LOCAL_SIZE,
    MAX_COMMENT = 65535,
};


bool ckpt__zip_sniff(const unsigned char *head, size_t n) {
    return n >= 4 && head[0] == 'P' && head[1] == 'K' &&
           ((head[2] == 3 && head[3] == 4) || (head[2] == 5 && head[3] == 6));
}

static ckpt_status bad(ckpt_error *err, const char *path, const char *name, uint64_t at, const char *what) {
    return ckpt__fail(err, CKPT__D(ZIP_INVALID), path, name, (int64_t)at, "%s", what);
}

typedef struct directory {
    uint64_t offset, size, entries;
} directory;

/* Finds the end of central directory (and its ZIP64 twin) from the tail. */
static ckpt_status find_directory(ckpt__source *src, directory *dir, ckpt_error *err) {
    uint64_t file_size = src->size;
    const char *path = src->name;
    if (file_size < EOCD_SIZE) return bad(err, path, NULL, 0, "file too small for a ZIP end record");
    /* The record closest to the end wins; most archives (torch's, and each
     * of the thousands of items of a DCP checkpoint) have no comment, so a
     * short tail is read first and the longest one only if it must be. */
    uint64_t full = file_size < EOCD_SIZE + MAX_COMMENT ? file_size : EOCD_SIZE + MAX_COMMENT;
    uint64_t tail_len = 0, tail_start = 0;
    unsigned char *tail = NULL;
    ckpt_status st = CKPT_OK;
    int64_t at = -1;
    for (uint64_t want = full < 4096 ? full : 4096; at < 0 && want > tail_len; want = full) {
        free(tail);
        tail_len = want;
        tail_start = file_size - tail_len;
        tail = ckpt__malloc((size_t)tail_len);
        if (!tail) return ckpt__fail(err, CKPT_E_NO_MEMORY, path, NULL, -1, "out of memory");
        st = ckpt__source_read(src, tail, tail_len, tail_start, err);
        for (int64_t i = (int64_t)tail_len - EOCD_SIZE; st == CKPT_OK && i >= 0; i--) {
            /* The comment length must reach exactly the end of the file. */
            if (ckpt__le32(tail + i) == SIG_EOCD && (uint64_t)i + EOCD_SIZE + ckpt__le16(tail + i + 20) == tail_len) {
                at = i;
                break;
            }
        }
        if (st) {
            free(tail);
            return st;
        }
    }
    if (at < 0) {
        free(tail);
        return bad(err, path, NULL, file_size, "no ZIP end-of-central-directory record (not a ZIP archive, or truncated)");
    }
    uint64_t eocd_offset = tail_start + (uint64_t)at;
    ckpt__rd e = ckpt__rd_over(tail + at + 4, EOCD_SIZE - 4, eocd_offset + 4);
    uint16_t disk = ckpt__rd_u16(&e), dir_disk = ckpt__rd_u16(&e), entries_here = ckpt__rd_u16(&e);
    dir->entries = ckpt__rd_u16(&e), dir->size = ckpt__rd_u32(&e), dir->offset = ckpt__rd_u32(&e);
    free(tail);
    if (disk || dir_disk || entries_here != dir->entries)
        return ckpt__fail(err, CKPT__D(ZIP_UNSUPPORTED), path, NULL, (int64_t)eocd_offset, "multi-disk ZIP archives are not supported");

    /* ZIP64: a locator just before the end record points to the real one.
     * torch always writes it, whether or not the sizes need it. */
    if (eocd_offset >= LOCATOR_SIZE) {
        unsigned char loc[LOCATOR_SIZE];
        st = ckpt__source_read(src, loc, LOCATOR_SIZE, eocd_offset - LOCATOR_SIZE, err);
        if (st) return st;
        if (ckpt__le32(loc) == SIG_ZIP64_LOCATOR) {
            uint64_t z = ckpt__le64(loc + 8);
            if (ckpt__le32(loc + 4) != 0 || ckpt__le32(loc + 16) > 1)
                return ckpt__fail(err, CKPT__D(ZIP_UNSUPPORTED), path, NULL, (int64_t)(eocd_offset - LOCATOR_SIZE),
                                  "multi-disk ZIP64 archives are not supported");
            if (z > eocd_offset - LOCATOR_SIZE || eocd_offset - LOCATOR_SIZE - z < ZIP64_EOCD_SIZE)
                return bad(err, path, NULL, eocd_offset - LOCATOR_SIZE, "ZIP64 locator points outside the archive");
            unsigned char r[ZIP64_EOCD_SIZE];
            st = ckpt__source_read(src, r, ZIP64_EOCD_SIZE, z, err);
            if (st) return st;
            if (ckpt__le32(r) != SIG_ZIP64_EOCD) return bad(err, path, NULL, z, "ZIP64 end record signature missing");
            if (ckpt__le32(r + 16) != 0 || ckpt__le32(r + 20) != 0 || ckpt__le64(r + 24) != ckpt__le64(r + 32))
                return ckpt__fail(err, CKPT__D(ZIP_UNSUPPORTED), path, NULL, (int64_t)z,
                                  "multi-disk ZIP64 archives are not supported");
            dir->entries = ckpt__le64(r + 32);
            dir->size = ckpt__le64(r + 40);
            dir->offset = ckpt__le64(r + 48);
            eocd_offset = z; /* the directory must end before the ZIP64 record */
        }
    }
    uint64_t end;
    if (!ckpt__add_u64(dir->offset, dir->size, &end) || end > eocd_offset)
        return bad(err, path, NULL, eocd_offset, "central directory lies outside the archive");
    if (dir->entries > CKPT__ZIP_MAX_ENTRIES || dir->entries > dir->size / CENTRAL_SIZE)
        return bad(err, path, NULL, eocd_offset, "entry count does not fit the central directory");
    return CKPT_OK;
}

/* A central directory entry, as it is written. */
typedef struct central {
    const unsigned char *name, *extra;
    size_t name_len, extra_len;
    uint16_t flags, method, disk;
    uint32_t crc32, comp32, size32, offset32;
} central;

enum { CENTRAL_OK, CENTRAL_NO_SIGNATURE, CENTRAL_PAST_END };

/* The entry at the cursor (over the directory), and the cursor past it. */
static int read_central(ckpt__rd *r, central *c) {
    if (ckpt__rd_left(r) < CENTRAL_SIZE || ckpt__rd_u32(r) != SIG_CENTRAL) return CENTRAL_NO_SIGNATURE;
    ckpt__rd_skip(r, 4); /* versions */
    c->flags = ckpt__rd_u16(r), c->method = ckpt__rd_u16(r);
    ckpt__rd_skip(r, 4); /* time and date */
    c->crc32 = ckpt__rd_u32(r), c->comp32 = ckpt__rd_u32(r), c->size32 = ckpt__rd_u32(r);
    c->name_len = ckpt__rd_u16(r), c->extra_len = ckpt__rd_u16(r);
    size_t comment_len = ckpt__rd_u16(r);
    c->disk = ckpt__rd_u16(r);
    ckpt__rd_skip(r, 6); /* attributes */
    c->offset32 = ckpt__rd_u32(r);
    c->name = ckpt__rd_bytes(r, c->name_len);
    c->extra = ckpt__rd_bytes(r, c->extra_len);
    ckpt__rd_skip(r, comment_len);
    return r->bad ? CENTRAL_PAST_END : CENTRAL_OK;
}

/* The sizes and offset of an entry: the central values, or the ZIP64
 * extended-information extra field's over those at 0xFFFFFFFF, in the
 * order the format fixes.  False when that field is missing or short. */
static bool entry_extent(const central *c, ckpt__zip_entry *e) {
    e->comp_size = c->comp32, e->size = c->size32, e->header_offset = c->offset32;
    bool need = c->size32 == 0xFFFFFFFFu || c->comp32 == 0xFFFFFFFFu || c->offset32 == 0xFFFFFFFFu;
    ckpt__rd r = ckpt__rd_over(c->extra, c->extra_len, 0);
    while (ckpt__rd_left(&r) >= 4) {
        uint16_t id = ckpt__rd_u16(&r);
        size_t n;
        const unsigned char *f = ckpt__rd_counted(&r, 2, false, &n);
        if (!f) return false;
        if (id != 0x0001) continue;
        ckpt__rd z = ckpt__rd_over(f, n, 0);
        if (c->size32 == 0xFFFFFFFFu) e->size = ckpt__rd_u64(&z);
        if (c->comp32 == 0xFFFFFFFFu) e->comp_size = ckpt__rd_u64(&z);
        if (c->offset32 == 0xFFFFFFFFu) e->header_offset = ckpt__rd_u64(&z);
        return !z.bad;
    }
    return !need;
}

static ckpt_status check_folder(ckpt__zip *zip, const char *path, ckpt__arena *arena, ckpt_error *err) {
    if (!zip->count) return bad(err, path, NULL, 0, "archive is empty");
    const char *first = zip->entries[0].name, *slash = strchr(first, '/');
    if (!slash || slash == first)
        return ckpt__fail(err, CKPT__D(ZIP_INVALID), path, first, (int64_t)zip->entries[0].header_offset,
                          "entry is not inside a top folder, as torch.save archives are");
    size_t n = (size_t)(slash - first);
    for (size_t i = 1; i < zip->count; i++) {
        const char *name = zip->entries[i].name;
        if (strncmp(name, first, n + 1) != 0)
            return ckpt__fail(err, CKPT__D(ZIP_INVALID), path, name, (int64_t)zip->entries[i].header_offset,
                              "entry is outside the archive's top folder '%.*s/'", (int)n, first);
    }
    zip->folder = ckpt__arena_strndup(arena, first, n);
    return zip->folder ? CKPT_OK : ckpt__fail(err, CKPT_E_NO_MEMORY, path, NULL, -1, "out of memory");
}

/* Local headers read ahead, in one batch: over HTTP a torch file's
 * hundreds of 30-byte headers would otherwise cost a round trip each.
 * Only the offsets of well-formed central entries are asked for, and a
 * failure here only means they are read one by one below (which reports
 * whatever is wrong, as without this). */
typedef struct prefetched {
    uint64_t *offsets; /* sorted as the entries come */
    unsigned char (*headers)[LOCAL_SIZE];
    size_t count;
} prefetched;

static void prefetch_locals(ckpt__source *src, const unsigned char *cd, const directory *dir, prefetched *pf) {
    memset(pf, 0, sizeof *pf);
    if (!(src->caps & CKPT__SRC_REMOTE) || !src->ops->read_many || dir->entries < 2) return;
    size_t n = 0;
    pf->offsets = ckpt__malloc((size_t)dir->entries * sizeof *pf->offsets);
    pf->headers = ckpt__malloc((size_t)dir->entries * sizeof *pf->headers);
    ckpt__read_req *reqs = ckpt__malloc((size_t)dir->entries * sizeof *reqs);
    ckpt__rd r = ckpt__rd_over(cd, (size_t)dir->size, dir->offset);
    for (uint64_t k = 0; pf->offsets && pf->headers && reqs && k < dir->entries; k++) {
        central c;
        ckpt__zip_entry e = {0};
        if (read_central(&r, &c) != CENTRAL_OK || !entry_extent(&c, &e)) break;
        if (e.header_offset > dir->offset || dir->offset - e.header_offset < LOCAL_SIZE) break;
        pf->offsets[n] = e.header_offset;
        reqs[n] = (ckpt__read_req){src, -1, e.header_offset, LOCAL_SIZE, LOCAL_SIZE, pf->headers[n], NULL};
        n++;
    }
    if (n && reqs && ckpt__source_read_many(src, reqs, n, NULL) == CKPT_OK) {
        pf->count = n;
        for (size_t i = 0; i < n; i++) ckpt__source_count(src, LOCAL_SIZE);
    }
    free(reqs);
}

ckpt_status ckpt__zip_open(ckpt__source *src, bool single_folder, ckpt__arena *arena,
                           ckpt__zip *out, ckpt_error *err) {
    const char *path = src->name;
    memset(out, 0, sizeof *out);
    directory dir = {0, 0, 0};
    ckpt_status st = find_directory(src, &dir, err);
    if (st) return st;
    unsigned char *cd = ckpt__malloc(dir.size ? (size_t)dir.size : 1);
    out->entries = ckpt__calloc(dir.entries ? (size_t)dir.entries : 1, sizeof *out->entries);
    if (!cd || !out->entries || !ckpt__name_table_init(&out->names, (size_t)dir.entries)) {
        free(cd);
        ckpt__zip_close(out);
        return ckpt__fail(err, CKPT_E_NO_MEMORY, path, NULL, -1, "out of memory for %llu entries",
                          (unsigned long long)dir.entries);
    }
    st = ckpt__source_read(src, cd, dir.size, dir.offset, err);
    prefetched pf = {0};
    if (st == CKPT_OK) prefetch_locals(src, cd, &dir, &pf);
    ckpt__rd r = ckpt__rd_over(cd, (size_t)dir.size, dir.offset);
    for (uint64_t k = 0; st == CKPT_OK && k < dir.entries; k++) {
        uint64_t at = ckpt__rd_offset(&r);
        central c;
        int got = read_central(&r, &c);
        if (got != CENTRAL_OK) {
            st = bad(err, path, NULL, at, got == CENTRAL_NO_SIGNATURE ? "central directory entry signature missing"
                                                                     : "central directory entry runs past the directory");
            break;
        }
        size_t name_len = c.name_len;
        ckpt__zip_entry *e = &out->entries[out->count];
        e->name = ckpt__arena_strndup(arena, (const char *)c.name, name_len);
        if (!e->name) {
            st = ckpt__fail(err, CKPT_E_NO_MEMORY, path, NULL, -1, "out of memory");
            break;
        }
        if (strlen(e->name) != name_len) {
            st = bad(err, path, NULL, at, "entry name contains a NUL byte");
            break;
        }
        uint16_t flags = c.flags;
        e->method = c.method;
        e->crc32 = c.crc32;
        if (!entry_extent(&c, e)) {
            st = ckpt__fail(err, CKPT__D(ZIP_INVALID), path, e->name, (int64_t)at, "ZIP64 extra field missing or short");
            break;
        }
        if (flags & 0x41) {
            st = ckpt__fail(err, CKPT__D(ZIP_UNSUPPORTED), path, e->name, (int64_t)at, "entry is encrypted");
            break;
        }
        if (c.disk != 0 && c.disk != 0xFFFF) {
            st = ckpt__fail(err, CKPT__D(ZIP_UNSUPPORTED), path, e->name, (int64_t)at, "entry starts on another disk");
            break;
        }
        if (e->method != 0 && e->method != 8) {
            st = ckpt__fail(err, CKPT__D(ZIP_UNSUPPORTED), path, e->name, (int64_t)at,
                            "compression method %u (only stored and DEFLATE are read)", e->method);
            break;
        }
        if (e->method == 0 && e->comp_size != e->size) {
            st = ckpt__fail(err, CKPT__D(ZIP_INVALID), path, e->name, (int64_t)at,
                            "stored entry with compressed size %llu but size %llu", (unsigned long long)e->comp_size,
                            (unsigned long long)e->size);
            break;
        }
        uint32_t prev;
        if (!ckpt__name_table_insert(&out->names, &out->entries[0].name, sizeof *e, (uint32_t)out->count, &prev)) {
            st = ckpt__fail(err, CKPT__D(DUPLICATE_NAME), path, e->name, (int64_t)at, "entry name appears twice in the archive");
            break;
        }
        out->count++;

        /* The local header gives the data offset. */
        unsigned char local[LOCAL_SIZE];
        uint64_t data_end;
        if (e->header_offset > dir.offset || dir.offset - e->header_offset < LOCAL_SIZE) {
            st = ckpt__fail(err, CKPT__D(ZIP_INVALID), path, e->name, (int64_t)at, "local header offset %llu lies outside the data area",
                            (unsigned long long)e->header_offset);
            break;
        }
        if (k < pf.count && pf.offsets[k] == e->header_offset) memcpy(local, pf.headers[k], LOCAL_SIZE);
        else if ((st = ckpt__source_read(src, local, LOCAL_SIZE, e->header_offset, err))) break;
        if (ckpt__le32(local) != SIG_LOCAL) {
            st = ckpt__fail(err, CKPT__D(ZIP_INVALID), path, e->name, (int64_t)e->header_offset, "local header signature missing");
            break;
        }
        if (ckpt__le16(local + 26) != name_len) {
            st = ckpt__fail(err, CKPT__D(ZIP_INVALID), path, e->name, (int64_t)e->header_offset,
                            "local and central headers disagree about the name");
            break;
        }
        e->data_offset = e->header_offset + LOCAL_SIZE + name_len + ckpt__le16(local + 28);
        if (!ckpt__add_u64(e->data_offset, e->comp_size, &data_end) || data_end > dir.offset) {
            st = ckpt__fail(err, CKPT__D(ZIP_INVALID), path, e->name, (int64_t)e->header_offset,
                            "entry data [%llu, +%llu) runs past the data area (ends at %llu)",
                            (unsigned long long)e->data_offset, (unsigned long long)e->comp_size,
                            (unsigned long long)dir.offset);
            break;
        }
    }
    free(cd);
    free(pf.offsets);
    free(pf.headers);
    if (st == CKPT_OK && single_folder) st = check_folder(out, path, arena, err);
    if (st) ckpt__zip_close(out);
    return st;
}

void ckpt__zip_close(ckpt__zip *zip) {
    free(zip->entries);
    ckpt__name_table_free(&zip->names);
    memset(zip, 0, sizeof *zip);
}

const ckpt__zip_entry *ckpt__zip_find(const ckpt__zip *zip, const char *name) {
    if (!zip->count) return NULL;
    int64_t i = ckpt__name_table_find(&zip->names, &zip->entries[0].name, sizeof *zip->entries, name);
    return i < 0 ? NULL : &zip->entries[i];
}

const ckpt__zip_entry *ckpt__zip_find_in_folder(const ckpt__zip *zip, const char *relative) {
    if (!zip->folder) return NULL;
    size_t a = strlen(zip->folder), b = strlen(relative);
    char stack[256], *name = a + b + 2 <= sizeof stack ? stack : ckpt__malloc(a + b + 2);
    if (!name) return NULL;
    memcpy(name, zip->folder, a);
    name[a] = '/';
    memcpy(name + a + 1, relative, b + 1);
    const ckpt__zip_entry *e = ckpt__zip_find(zip, name);
    if (name != stack) free(name);
    return e;
}

bool ckpt__zip_recorded_crc(const ckpt__zip_entry *e, ckpt__recorded_crc *out) {
    *out = (ckpt__recorded_crc){.name = e->name, .offset = e->data_offset, .stored_size = e->comp_size,
                                .size = e->size, .crc32 = e->crc32, .deflate = e->method == 8};
    return e->crc32 != 0 || e->size == 0;
}

static ckpt_status inflate_entry(const unsigned char *in, const ckpt__zip_entry *e, const char *path, char *out,
                                 ckpt_error *err) {
    z_stream z;
    memset(&z, 0, sizeof z);
    if (inflateInit2(&z, -MAX_WBITS) != Z_OK)
        return ckpt__fail(err, CKPT_E_NO_MEMORY, path, e->name, -1, "cannot start zlib");
    ckpt_status st = CKPT_OK;
    uint64_t in_left = e->comp_size, out_left = e->size;
    z.next_in = (unsigned char *)in;
    z.next_out = (unsigned char *)out;
    int r = Z_OK;
    while (r == Z_OK) {
        /* zlib counts in uInt: feed at most 1 GiB a call. */
        uInt in_chunk = in_left > (1u << 30) ? (1u << 30) : (uInt)in_left;
        uInt out_chunk = out_left > (1u << 30) ? (1u << 30) : (uInt)out_left;
        z.avail_in = in_chunk;
        z.avail_out = out_chunk;
        r = inflate(&z, Z_NO_FLUSH);
        in_left -= in_chunk - z.avail_in;
        out_left -= out_chunk - z.avail_out;
        if (r == Z_OK && in_chunk == z.avail_in && out_chunk == z.avail_out) break; /* no progress */
    }
    if (r != Z_STREAM_END || out_left != 0)
        st = ckpt__fail(err, CKPT__D(ZIP_INVALID), path, e->name, (int64_t)e->data_offset,
                        "DEFLATE data is damaged or does not give the recorded %llu bytes", (unsigned long long)e->size);
    inflateEnd(&z);
    return st;
}

ckpt_status ckpt__zip_read_entry(ckpt__source *src, const ckpt__zip_entry *e, uint64_t limit, char **data,
                                 ckpt_error *err) {
    const char *path = src->name;
    *data = NULL;
    if (e->size > limit)
        return ckpt__fail(err, CKPT_E_LIMIT, path, e->name, (int64_t)e->header_offset,
                          "entry of %llu bytes is over the %llu-byte limit for records", (unsigned long long)e->size,
                          (unsigned long long)limit);
    if (e->method == 8 && e->comp_size > limit)
        return ckpt__fail(err, CKPT_E_LIMIT, path, e->name, (int64_t)e->header_offset,
                          "compressed entry of %llu bytes is over the limit", (unsigned long long)e->comp_size);
    /* DEFLATE expands at most 1032:1: a larger declared size is a lie, and
     * must not decide how much memory is allocated. */
    if (e->method == 8 && e->size / 1032 > e->comp_size + 1)
        return ckpt__fail(err, CKPT__D(ZIP_INVALID), path, e->name, (int64_t)e->header_offset,
                          "declares %llu bytes from %llu compressed bytes, more than DEFLATE can expand",
                          (unsigned long long)e->size, (unsigned long long)e->comp_size);
    char *buf = ckpt__malloc((size_t)e->size + 1);
    if (!buf) return ckpt__fail(err, CKPT_E_NO_MEMORY, path, e->name, -1, "cannot allocate %llu bytes", (unsigned long long)e->size);
    ckpt_status st;
    if (e->method == 0) {
        st = ckpt__source_read(src, buf, e->size, e->data_offset, err);
    } else {
        unsigned char *in = ckpt__malloc(e->comp_size ? (size_t)e->comp_size : 1);
        st = in ? ckpt__source_read(src, in, e->comp_size, e->data_offset, err)
                : ckpt__fail(err, CKPT_E_NO_MEMORY, path, e->name, -1, "out of memory");
        if (st == CKPT_OK) st = inflate_entry(in, e, path, buf, err);
        free(in);
    }
    if (st == CKPT_OK && e->crc32 != 0) {
        uLong crc = crc32_z(0L, Z_NULL, 0);
        crc = crc32_z(crc, (const Bytef *)buf, (z_size_t)e->size);
        if ((uint32_t)crc != e->crc32)
            st = ckpt__fail(err, CKPT__D(CHECKSUM), path, e->name, (int64_t)e->data_offset,
                            "CRC-32 is %08lx, the archive records %08x", (unsigned long)crc, e->crc32);
    }
    if (st) {
        free(buf);
        return st;
    }
    buf[e->size] = '\0';
    *data = buf;
    return CKPT_OK;
}

ckpt_status ckpt__zip_read_prefix(ckpt__source *src, const ckpt__zip_entry *e, uint64_t n, void *out,
                                  ckpt_error *err) {
    const char *path = src->name;
    if (n > e->size)
        return ckpt__fail(err, CKPT_E_OUT_OF_RANGE, path, e->name, (int64_t)e->header_offset,
                          "%llu bytes asked of an entry of %llu", (unsigned long long)n, (unsigned long long)e->size);
    if (e->method == 0 || n == 0) return ckpt__source_read(src, out, n, e->data_offset, err);
    enum { IN = 64 << 10 };
    unsigned char *in = ckpt__malloc(IN);
    if (!in) return ckpt__oom(err, path, e->name);
    z_stream z;
    memset(&z, 0, sizeof z);
    if (inflateInit2(&z, -MAX_WBITS) != Z_OK) {
        free(in);
        return ckpt__fail(err, CKPT_E_NO_MEMORY, path, e->name, -1, "cannot start zlib");
    }
    ckpt_status st = CKPT_OK;
    uint64_t fed = 0, produced = 0;
    int r = Z_OK;
    while (st == CKPT_OK && produced < n && r == Z_OK) {
        if (z.avail_in == 0) {
            uint64_t chunk = e->comp_size - fed < IN ? e->comp_size - fed : IN;
            if (chunk == 0) break;
            if ((st = ckpt__source_read(src, in, chunk, e->data_offset + fed, err))) break;
            fed += chunk;
            z.next_in = in;
            z.avail_in = (uInt)chunk;
        }
        uint64_t want = n - produced;
        z.next_out = (unsigned char *)out + produced;
        z.avail_out = want > (1u << 30) ? (1u << 30) : (uInt)want;
        uInt before = z.avail_out;
        r = inflate(&z, Z_NO_FLUSH);
        produced += before - z.avail_out;
        if (r == Z_BUF_ERROR && z.avail_in == 0) r = Z_OK; /* needs more input */
    }
    if (st == CKPT_OK && produced < n)
        st = ckpt__fail(err, CKPT__D(ZIP_INVALID), path, e->name, (int64_t)e->data_offset,
                        "DEFLATE data is damaged: it gives %llu bytes, not the %llu asked of the %llu recorded",
                        (unsigned long long)produced, (unsigned long long)n, (unsigned long long)e->size);
    inflateEnd(&z);
    free(in);
    return st;
}

/* ---- writing ---- */

void ckpt__zip_put_header(ckpt__buf *b, const ckpt__zip_header *h, bool in_directory) {
    ckpt__put_le(b, in_directory ? SIG_CENTRAL : SIG_LOCAL, 4);
    if (in_directory) ckpt__put_le(b, h->made_by, 2);
    /* stored, no time: the same tensors give the same bytes */
    CKPT__PUT_FIELDS(b, {2, h->needed}, {2, h->flags}, {2, 0}, {2, 0}, {2, h->dos_date}, {4, h->crc}, {4, h->size},
                     {4, h->size}, {2, h->name_len}, {2, h->extra_len});
    if (in_directory) CKPT__PUT_FIELDS(b, {6, 0}, {4, h->external}, {4, h->local}); /* no comment, one disk */
}

void ckpt__zip_put_ends(ckpt__buf *b, uint64_t n, uint64_t cd_size, uint64_t cd_at, uint16_t made_by,
                        uint16_t needed) {
    const uint64_t max32 = 0xFFFFFFFFu;
    uint64_t end64 = cd_at + cd_size, entries = n < 0xFFFF ? n : 0xFFFF;
    CKPT__PUT_FIELDS(b, {4, SIG_ZIP64_EOCD}, {8, ZIP64_EOCD_SIZE - 12}, {2, made_by}, {2, needed}, {8, 0}, {8, n},
                     {8, n}, {8, cd_size}, {8, cd_at}, {4, SIG_ZIP64_LOCATOR}, {4, 0}, {8, end64}, {4, 1}, {4, SIG_EOCD},
                     {4, 0}, {2, entries}, {2, entries}, {4, cd_size < max32 ? cd_size : max32},
                     {4, cd_at < max32 ? cd_at : max32}, {2, 0});
}
