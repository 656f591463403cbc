/* torch_save.c — see torch_save.h. */
#include "torch_save.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../base/cursor.h"
#include "zip.h"

/* ---- pickles ---------------------------------------------------------------------- */

void ckpt__pkw_op(ckpt__buf *b, unsigned char op) { ckpt__buf_append(b, (const char *)&op, 1); }

void ckpt__pkw_int(ckpt__buf *b, int64_t v) {
    if (v >= 0 && v < 256) {
        ckpt__pkw_op(b, 'K');
        ckpt__put_le(b, (uint64_t)v, 1);
    } else if (v >= 0 && v < 65536) {
        ckpt__pkw_op(b, 'M');
        ckpt__put_le(b, (uint64_t)v, 2);
    } else if (v >= INT32_MIN && v <= INT32_MAX) {
        ckpt__pkw_op(b, 'J');
        ckpt__put_le(b, (uint64_t)(uint32_t)(int32_t)v, 4);
    } else {
        int n = 1; /* the fewest bytes that hold v in two's complement, as CPython */
        while (n < 8 && (v < -(INT64_C(1) << (8 * n - 1)) || v >= (INT64_C(1) << (8 * n - 1)))) n++;
        ckpt__pkw_op(b, 0x8a);
        ckpt__put_le(b, (uint64_t)n, 1);
        ckpt__put_le(b, (uint64_t)v, n);
    }
}

void ckpt__pkw_float(ckpt__buf *b, double v) {
    uint64_t bits;
    memcpy(&bits, &v, 8);
    ckpt__pkw_op(b, 'G');
    ckpt__put_be(b, bits, 8);
}

bool ckpt__pkw_number(ckpt__buf *b, const char *text) {
    if (strpbrk(text, ".eE")) {
        ckpt__pkw_float(b, strtod(text, NULL));
        return true;
    }
    char *end;
    errno = 0;
    long long v = strtoll(text, &end, 10);
    if (errno || *end) return false;
    ckpt__pkw_int(b, v);
    return true;
}

void ckpt__pkw_latin1(ckpt__buf *text, const char *s, size_t n) {
    for (size_t k = 0; k < n; k++) {
        unsigned char c = (unsigned char)s[k];
        if (c < 0x80) ckpt__pkw_op(text, c);
        else ckpt__pkw_op(text, (unsigned char)(0xC0 | c >> 6)), ckpt__pkw_op(text, (unsigned char)(0x80 | (c & 0x3F)));
    }
}

void ckpt__pkw_str(ckpt__buf *b, const char *s, size_t n) {
    ckpt__pkw_op(b, 'X');
    ckpt__put_le(b, n, 4);
    ckpt__buf_append(b, s, n);
}

void ckpt__pkw_global(ckpt__buf *b, const char *module, const char *name) {
    ckpt__pkw_op(b, 'c');
    ckpt__buf_puts(b, module);
    ckpt__pkw_op(b, '\n');
    ckpt__buf_puts(b, name);
    ckpt__pkw_op(b, '\n');
}

void ckpt__pkw_dims(ckpt__buf *b, const uint64_t *v, uint32_t n) {
    if (n == 0) {
        ckpt__pkw_op(b, ')');
        return;
    }
    if (n > 3) ckpt__pkw_op(b, '(');
    for (uint32_t i = 0; i < n; i++) ckpt__pkw_int(b, (int64_t)v[i]);
    ckpt__pkw_op(b, n == 1 ? 0x85 : n == 2 ? 0x86 : n == 3 ? 0x87 : 't');
}

uint32_t ckpt__pkw_memo_put(ckpt__buf *b, uint32_t *memo_count) {
    uint32_t index = (*memo_count)++;
    ckpt__pkw_op(b, index < 256 ? 'q' : 'r');
    ckpt__put_le(b, index, index < 256 ? 1 : 4);
    return index;
}

void ckpt__pkw_memo_get(ckpt__buf *b, uint32_t index) {
    ckpt__pkw_op(b, index < 256 ? 'h' : 'j');
    ckpt__put_le(b, index, index < 256 ? 1 : 4);
}

/* ---- dtypes ------------------------------------------------------------------------- */

static const ckpt__torch_type torch_types[] = {
    {CKPT_F32, "float32", "FloatStorage"},       {CKPT_F64, "float64", "DoubleStorage"},
    {CKPT_F16, "float16", "HalfStorage"},        {CKPT_BF16, "bfloat16", "BFloat16Storage"},
    {CKPT_I64, "int64", "LongStorage"},          {CKPT_I32, "int32", "IntStorage"},
    {CKPT_I16, "int16", "ShortStorage"},         {CKPT_I8, "int8", "CharStorage"},
    {CKPT_U8, "uint8", "ByteStorage"},           {CKPT_BOOL, "bool", "BoolStorage"},
    {CKPT_C64, "complex64", "ComplexFloatStorage"}, {CKPT_U16, "uint16", NULL},
    {CKPT_U32, "uint32", NULL},                  {CKPT_U64, "uint64", NULL},
    {CKPT_F8_E5M2, "float8_e5m2", NULL},         {CKPT_F8_E4M3, "float8_e4m3fn", NULL},
    {CKPT_F8_E8M0, "float8_e8m0fnu", NULL},      {CKPT_F8_E4M3FNUZ, "float8_e4m3fnuz", NULL},
    {CKPT_F8_E5M2FNUZ, "float8_e5m2fnuz", NULL}, {CKPT_F4, "float4_e2m1fn_x2", NULL, .pairs = true},
    /* torch's other dtypes: known by name (a DCP .metadata may name them), held by nothing ckpt has */
    {0, "complex32", NULL}, {0, "complex128", NULL}, {0, "qint8", NULL}, {0, "qint32", NULL},
    {0, "quint8", NULL}, {0, "quint4x2", NULL}, {0, "quint2x4", NULL}, {0, "bits1x8", NULL},
    {0, "bits2x4", NULL}, {0, "bits4x2", NULL}, {0, "bits8", NULL}, {0, "bits16", NULL},
    {0, "int1", NULL}, {0, "int2", NULL}, {0, "int3", NULL}, {0, "int4", NULL}, {0, "int5", NULL},
    {0, "int6", NULL}, {0, "int7", NULL}, {0, "uint1", NULL}, {0, "uint2", NULL}, {0, "uint3", NULL},
    {0, "uint4", NULL}, {0, "uint5", NULL}, {0, "uint6", NULL}, {0, "uint7", NULL},
};
enum { TORCH_TYPES = sizeof torch_types / sizeof torch_types[0] };

static const ckpt__torch_type *type_of(ckpt_dtype d) {
    if (d == CKPT_DTYPE_INVALID) return NULL;
    for (size_t i = 0; i < TORCH_TYPES; i++)
        if (torch_types[i].dtype == d) return &torch_types[i];
    return NULL;
}

const ckpt__torch_type *ckpt__torch_type_of(ckpt_dtype d) {
    const ckpt__torch_type *t = type_of(d);
    return t && !t->pairs ? t : NULL;
}

const char *ckpt__torch_dtype_name(ckpt_dtype d) {
    const ckpt__torch_type *t = type_of(d);
    return t ? t->name : NULL;
}

const ckpt__torch_type *ckpt__torch_type_named(const char *name) {
    for (size_t i = 0; i < TORCH_TYPES; i++)
        if (!strcmp(torch_types[i].name, name)) return &torch_types[i];
    return NULL;
}

ckpt_dtype ckpt__torch_storage_dtype(const char *storage) {
    for (size_t i = 0; i < TORCH_TYPES; i++)
        if (torch_types[i].storage && !strcmp(torch_types[i].storage, storage)) return torch_types[i].dtype;
    return CKPT_DTYPE_INVALID;
}

/* ---- archives ------------------------------------------------------------------------- */

#define ZIP32_MAX 0xFFFFFFFFull

static bool big(uint64_t v) { return v >= ZIP32_MAX; }

static size_t name_len(const char *folder, const ckpt__torch_record *r) { return strlen(folder) + 1 + strlen(r->name); }

/* miniz's ZIP64 field, in a local header or the directory: the sizes when
 * the size needs them, the local header's offset when it does. */
static size_t zip64_len(const ckpt__torch_record *r) {
    return big(r->size) || big(r->local) ? 4 + (big(r->size) ? 16 : 0) + (big(r->local) ? 8 : 0) : 0;
}

/* getPadding: 'Z's after "FB" and their length, up to the next 64 bytes. */
static size_t padding(const char *folder, const ckpt__torch_record *r) {
    uint64_t start = r->local + CKPT__ZIP_LOCAL_SIZE + name_len(folder, r) + zip64_len(r) + 4;
    return (size_t)((CKPT__TORCH_ALIGN - start % CKPT__TORCH_ALIGN) % CKPT__TORCH_ALIGN);
}

static size_t descriptor_len(const ckpt__torch_record *r) { return !r->size ? 0 : zip64_len(r) ? 24 : 16; }

uint64_t ckpt__torch_records_place(const char *folder, ckpt__torch_record *r, size_t n, uint64_t at) {
    for (size_t i = 0; i < n; i++) {
        r[i].local = at;
        r[i].data = at + CKPT__ZIP_LOCAL_SIZE + name_len(folder, &r[i]) + zip64_len(&r[i]) + 4 + padding(folder, &r[i]);
        at = r[i].data + r[i].size + descriptor_len(&r[i]);
    }
    return at;
}

static void put_name(ckpt__buf *b, const char *folder, const ckpt__torch_record *r) {
    ckpt__buf_puts(b, folder);
    ckpt__buf_puts(b, "/");
    ckpt__buf_puts(b, r->name);
}

static void put_zip64(ckpt__buf *b, const ckpt__torch_record *r, uint64_t compressed) {
    if (!zip64_len(r)) return;
    CKPT__PUT_FIELDS(b, {2, 1}, {2, zip64_len(r) - 4});
    if (big(r->size)) ckpt__put_le(b, r->size, 8), ckpt__put_le(b, compressed, 8);
    if (big(r->local)) ckpt__put_le(b, r->local, 8);
}

void ckpt__torch_local_header(ckpt__buf *b, const char *folder, const ckpt__torch_record *r) {
    size_t pad = padding(folder, r);
    /* version needed 0 (stored); a descriptor follows the data, UTF-8 names; no date (miniz built without
     * them); CRC and sizes in the descriptor */
    ckpt__zip_header h = {.flags = r->size ? 0x0808 : 0x0800, .name_len = (uint16_t)name_len(folder, r),
                          .extra_len = (uint16_t)(zip64_len(r) + 4 + pad)};
    ckpt__zip_put_header(b, &h, false);
    put_name(b, folder, r);
    put_zip64(b, r, 0); /* miniz writes it before it knows the compressed size */
    ckpt__buf_puts(b, "FB");
    ckpt__put_le(b, pad, 2);
    for (size_t i = 0; i < pad; i++) ckpt__buf_append(b, "Z", 1);
}

void ckpt__torch_descriptor(ckpt__buf *b, const ckpt__torch_record *r) {
    if (!r->size) return;
    unsigned n = zip64_len(r) ? 8 : 4;
    CKPT__PUT_FIELDS(b, {4, 0x08074b50}, {4, r->crc}, {n, r->size}, {n, r->size});
}

uint64_t ckpt__torch_directory_size(const char *folder, const ckpt__torch_record *r, size_t n) {
    uint64_t size = CKPT__ZIP_ENDS_SIZE;
    for (size_t i = 0; i < n; i++) size += CKPT__ZIP_CENTRAL_SIZE + name_len(folder, &r[i]) + zip64_len(&r[i]);
    return size;
}

void ckpt__torch_directory(ckpt__buf *b, const char *folder, const ckpt__torch_record *r, size_t n, uint64_t cd_at) {
    size_t start = b->len;
    for (size_t i = 0; i < n; i++) {
        /* made by and needed: miniz leaves 0 for stored records; no date, no attributes */
        ckpt__zip_header h = {.flags = r[i].size ? 0x0808 : 0x0800, .crc = r[i].crc,
                              .size = (uint32_t)(big(r[i].size) ? ZIP32_MAX : r[i].size),
                              .local = (uint32_t)(big(r[i].local) ? ZIP32_MAX : r[i].local),
                              .name_len = (uint16_t)name_len(folder, &r[i]), .extra_len = (uint16_t)zip64_len(&r[i])};
        ckpt__zip_put_header(b, &h, true);
        put_name(b, folder, &r[i]);
        put_zip64(b, &r[i], r[i].size);
    }
    /* the ZIP64 end of central directory (always): made by 3.0 on Unix, 4.5 needed, as miniz writes it */
    ckpt__zip_put_ends(b, n, b->len - start, cd_at, 0x031E, 45);
}

/* ---- the serialization id ------------------------------------------------------------ */

/* libstdc++'s std::_Hash_bytes (the 64-bit murmur variant), seed 0xc70f6907. */
static uint64_t hash_bytes(const char *s, size_t n) {
    const uint64_t mul = (UINT64_C(0xc6a4a793) << 32) + UINT64_C(0x5bd1e995);
    uint64_t h = UINT64_C(0xc70f6907) ^ (n * mul);
    size_t whole = n & ~(size_t)7;
    for (size_t i = 0; i < whole; i += 8) {
        uint64_t v = ckpt__le64((const unsigned char *)s + i) * mul;
        v ^= v >> 47;
        h ^= v * mul;
        h *= mul;
    }
    if (n & 7) {
        h ^= ckpt__load_le((const unsigned char *)s + whole, (unsigned)(n & 7));
        h *= mul;
    }
    h ^= h >> 47;
    h *= mul;
    return h ^ (h >> 47);
}

static uint64_t hash_combine(uint64_t seed, uint64_t value) {
    return seed ^ (value + UINT64_C(0x9e3779b9) + (seed << 6) + (seed >> 2));
}

/* The bucket counts a libstdc++ unordered_set goes through as it grows
 * one element at a time (_Prime_rehash_policy, load factor 1: 13 for the
 * first element, then the first prime of its list at or above twice the
 * count, each time the count passes it). */
static const uint64_t bucket_counts[] = {
    13,        29,        59,         127,        257,        541,        1109,       2357,
    5087,      10273,     20753,      42043,      85229,      172933,     351061,     712697,
    1447153,   2938679,   5967347,    12117689,   24607243,   49969847,   101473717,  206062531,
    418451333, 849749479, 1725587117, 3504151727, 8589934583,
};

enum { NONE = SIZE_MAX, BEFORE_BEGIN = SIZE_MAX - 1 };

/* Inserts node i into bucket b of a libstdc++ hashtable (its singly linked
 * list `next` from *head; bucket[b]: the node before the bucket's first,
 * BEFORE_BEGIN, or NONE when empty) — _M_insert_bucket_begin. */
static void bucket_insert(size_t *next, size_t *head, size_t *bucket, const uint64_t *h, uint64_t count, size_t i,
                          size_t b) {
    size_t before = bucket[b];
    if (before != NONE) { /* after the node before the bucket's first */
        size_t *link = before == BEFORE_BEGIN ? head : &next[before];
        next[i] = *link;
        *link = i;
        return;
    }
    next[i] = *head; /* a new bucket: at the front of the list */
    *head = i;
    if (next[i] != NONE) bucket[h[next[i]] % count] = i;
    bucket[b] = BEFORE_BEGIN;
}

/* _M_rehash_aux for unique keys: the nodes in list order moved into
 * `count` new buckets. */
static void rehash(size_t *next, size_t *head, size_t *bucket, const uint64_t *h, uint64_t count) {
    for (uint64_t k = 0; k < count; k++) bucket[k] = NONE;
    size_t p = *head, bbegin = 0;
    *head = NONE;
    while (p != NONE) {
        size_t following = next[p], b = (size_t)(h[p] % count);
        if (bucket[b] == NONE) {
            next[p] = *head;
            *head = p;
            bucket[b] = BEFORE_BEGIN;
            if (next[p] != NONE) bucket[bbegin] = p;
            bbegin = b;
        } else {
            size_t *link = bucket[b] == BEFORE_BEGIN ? head : &next[bucket[b]];
            next[p] = *link;
            *link = p;
        }
        p = following;
    }
}

ckpt_status ckpt__torch_serialization_id(const ckpt__torch_record *r, size_t n, char out[41]) {
    if (n > bucket_counts[sizeof bucket_counts / sizeof bucket_counts[0] - 1]) return CKPT_E_LIMIT;
    uint64_t *h = ckpt__malloc((n ? n : 1) * sizeof *h);
    size_t *next = ckpt__malloc((n ? n : 1) * sizeof *next);
    size_t cap = 0;
    while (cap < sizeof bucket_counts / sizeof bucket_counts[0] - 1 && bucket_counts[cap] < n) cap++;
    size_t *bucket = ckpt__malloc((size_t)bucket_counts[cap] * sizeof *bucket);
    if (!h || !next || !bucket) {
        free(h), free(next), free(bucket);
        return CKPT_E_NO_MEMORY;
    }
    size_t head = NONE, level = 0;
    for (size_t k = 0; k < bucket_counts[0]; k++) bucket[k] = NONE;
    for (size_t i = 0; i < n; i++) { /* the unordered_set of names, inserted in write order */
        h[i] = hash_bytes(r[i].name, strlen(r[i].name));
        if (i + 1 > bucket_counts[level]) rehash(next, &head, bucket, h, bucket_counts[++level]);
        bucket_insert(next, &head, bucket, h, bucket_counts[level], i, (size_t)(h[i] % bucket_counts[level]));
    }
    uint64_t names = 0, crcs = 0;
    for (size_t p = head; p != NONE; p = next[p]) names = hash_combine(names, h[p]);
    for (size_t i = 0; i < n; i++)
        if (r[i].size) crcs = hash_combine(crcs, r[i].crc); /* the descriptors written */
    snprintf(out, 41, "%020llu%020llu", (unsigned long long)names, (unsigned long long)crcs);
    free(h), free(next), free(bucket);
    return CKPT_OK;
}
