/* gguf.c — reading GGUF files and gguf-split parts (see gguf.h). */
#include "gguf.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../base/cursor.h"
#include "../io/file.h"
#include "format.h"
#include "../base/json.h"

static const char *const type_names[] = {"u8", "i8", "u16", "i16", "u32", "i32", "f32",
                                         "bool", "string", "array", "u64", "i64", "f64"};
enum { T_U8, T_I8, T_U16, T_I16, T_U32, T_I32, T_F32, T_BOOL, T_STRING, T_ARRAY, T_U64, T_I64, T_F64, T_COUNT };

const char *ckpt__gguf_type_name(uint32_t type) { return type < T_COUNT ? type_names[type] : NULL; }
const char *ckpt_kv_type_name(ckpt_kv_type type) { return ckpt__gguf_type_name((uint32_t)type); }

/* Bytes of a fixed-size value type; 0 for strings and arrays. */
static unsigned fixed_size(uint32_t t) {
    static const unsigned sizes[T_COUNT] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
    return t < T_COUNT ? sizes[t] : 0;
}

/* ---- a buffered cursor over the source ------------------------------------ */

typedef struct cursor {
    ckpt__source *src;
    const char *path;
    uint64_t pos, size;
    unsigned char *buf;
    uint64_t buf_at;
    size_t buf_len, cap;
    size_t fill; /* the next refill's size: it grows from CURSOR_FIRST to cap */
    bool swap; /* a big-endian file */
    ckpt_error *err;
    char *scratch; /* a string inside an array, until its JSON is written */
    size_t scratch_cap;
} cursor;

/* The header is read through a buffer refilled at growing sizes: the
 * first refill is what a remote source brought with its opening request
 * (http_source.c's HEAD_BYTES), so a header that fits costs no second
 * request and no tensor bytes; a vocabulary of megabytes then comes in
 * doubling reads, up to 4 MiB from a remote source and 1 MiB from a local
 * one (the page cache makes more pointless). */
enum { CURSOR_FIRST = 256 << 10, CURSOR_CHUNK = 1 << 20, CURSOR_CHUNK_REMOTE = 4 << 20 };

static ckpt_status truncated(cursor *c, uint64_t need, const char *what) {
    return ckpt__fail(c->err, CKPT_E_TRUNCATED, c->path, NULL, (int64_t)c->pos,
                      "file ends after %llu bytes, inside %s (%llu more bytes needed)", (unsigned long long)c->size,
                      what, (unsigned long long)(c->pos + need - c->size));
}

/* Copies the next n bytes into dst and advances. */
static ckpt_status take(cursor *c, void *dst, uint64_t n, const char *what) {
    if (n > c->size - c->pos) return truncated(c, n, what);
    unsigned char *out = dst;
    while (n) {
        if (c->pos >= c->buf_at && c->pos < c->buf_at + c->buf_len) {
            size_t off = (size_t)(c->pos - c->buf_at), k = c->buf_len - off;
            if (k > n) k = (size_t)n;
            memcpy(out, c->buf + off, k);
            out += k, n -= k, c->pos += k;
            continue;
        }
        if (n >= c->cap) { /* large: straight into place */
            ckpt_status st = ckpt__source_read(c->src, out, n, c->pos, c->err);
            if (st) return st;
            c->pos += n;
            return CKPT_OK;
        }
        uint64_t left = c->size - c->pos;
        size_t want = c->fill < c->cap ? c->fill : c->cap;
        size_t fill = left < want ? (size_t)left : want;
        ckpt_status st = ckpt__source_read(c->src, c->buf, fill, c->pos, c->err);
        if (st) return st;
        c->buf_at = c->pos, c->buf_len = fill, c->fill = want * 2;
    }
    return CKPT_OK;
}

/* An unsigned integer of `width` bytes, in the file's byte order. */
static ckpt_status rd_uint(cursor *c, unsigned width, uint64_t *v, const char *what) {
    unsigned char b[8];
    ckpt_status st = take(c, b, width, what);
    *v = st ? 0 : c->swap ? ckpt__load_be(b, width) : ckpt__load_le(b, width);
    return st;
}

static ckpt_status rd32(cursor *c, uint32_t *v, const char *what) {
    uint64_t x;
    ckpt_status st = rd_uint(c, 4, &x, what);
    *v = (uint32_t)x;
    return st;
}

static ckpt_status rd64(cursor *c, uint64_t *v, const char *what) { return rd_uint(c, 8, v, what); }

/* Room for a string of n bytes: arena memory, or (no arena) the cursor's
 * scratch, which the next string reuses. */
static char *string_room(cursor *c, ckpt__arena *arena, uint64_t n) {
    if (arena) return ckpt__arena_alloc(arena, (size_t)n + 1);
    if (n + 1 > c->scratch_cap) {
        char *s = ckpt__realloc(c->scratch, (size_t)n + 1);
        if (!s) return NULL;
        c->scratch = s;
        c->scratch_cap = (size_t)n + 1;
    }
    return c->scratch;
}

/* A string: u64 length + bytes, UTF-8, into the arena (NULL: the
 * cursor's scratch). */
static ckpt_status rd_string(cursor *c, ckpt__arena *arena, const char *what, const char **out, uint64_t *len) {
    uint64_t at = c->pos, n;
    ckpt_status st = rd64(c, &n, what);
    if (st) return st;
    if (n > c->size - c->pos)
        return ckpt__fail(c->err, CKPT__D(GGUF_LENGTH), c->path, NULL, (int64_t)at,
                          "%s has length %llu but only %llu bytes of the file follow", what, (unsigned long long)n,
                          (unsigned long long)(c->size - c->pos));
    char *s = string_room(c, arena, n);
    if (!s) return ckpt__oom(c->err, c->path, what);
    if ((st = take(c, s, n, what))) return st;
    s[n] = '\0';
    size_t bad = ckpt__utf8_check((const unsigned char *)s, (size_t)n);
    if (bad != n)
        return ckpt__fail(c->err, CKPT__D(GGUF_LENGTH), c->path, NULL, (int64_t)(at + 8 + bad),
                          "%s is not valid UTF-8 (byte 0x%02x)", what, (unsigned char)s[bad]);
    *out = s;
    if (len) *len = n;
    return CKPT_OK;
}

/* ---- values ----------------------------------------------------------------- */

static bool is_signed(uint32_t t) { return t == T_I8 || t == T_I16 || t == T_I32 || t == T_I64; }

/* A fixed-size value's numbers, from its bits: unsigned, signed and as a
 * double (a float's integers are 0). */
static void scalar_numbers(ckpt_kv *kv, uint32_t type, uint64_t bits) {
    unsigned size = fixed_size(type);
    if (type == T_F32 || type == T_F64) {
        if (type == T_F32) kv->f = ckpt__f32_from((uint32_t)bits);
        else memcpy(&kv->f, &bits, 8);
        kv->i = 0, kv->u = 0;
        return;
    }
    bool negative = is_signed(type) && size < 8 && (bits >> (8 * size - 1)) & 1;
    kv->i = (int64_t)(negative ? bits | ~0ULL << (8 * size) : bits);
    kv->u = is_signed(type) ? (uint64_t)kv->i : bits;
    kv->f = is_signed(type) ? (double)kv->i : (double)bits;
}

static void json_number(ckpt__buf *b, uint32_t type, const ckpt_kv *n) {
    char tmp[40];
    if (type == T_BOOL) snprintf(tmp, sizeof tmp, "%s", n->u ? "true" : "false");
    else if (is_signed(type)) snprintf(tmp, sizeof tmp, "%lld", (long long)n->i);
    else if (type != T_F32 && type != T_F64) snprintf(tmp, sizeof tmp, "%llu", (unsigned long long)n->u);
    else if (isnan(n->f)) snprintf(tmp, sizeof tmp, "\"nan\"");
    else if (isinf(n->f)) snprintf(tmp, sizeof tmp, n->f > 0 ? "\"inf\"" : "\"-inf\"");
    else ckpt__shortest_float(tmp, sizeof tmp, n->f, type == T_F32); /* 1e-05, not 9.99999975e-06 */
    ckpt__buf_puts(b, tmp);
}

/* A fixed-size value (its numbers into *kv, its little-endian bytes onto
 * `enc`), and its bytes in the host's order into `native` when not NULL. */
static ckpt_status read_number(cursor *c, uint32_t type, ckpt_kv *kv, ckpt__buf *enc, void *native, const char *what) {
    unsigned size = fixed_size(type);
    uint64_t bits;
    ckpt_status st = rd_uint(c, size, &bits, what);
    if (st) return st;
    scalar_numbers(kv, type, bits);
    ckpt__put_le(enc, bits, size);
    uint8_t b8 = (uint8_t)bits;
    uint16_t b16 = (uint16_t)bits;
    uint32_t b32 = (uint32_t)bits;
    if (native) memcpy(native, size == 1 ? (void *)&b8 : size == 2 ? (void *)&b16 : size == 4 ? (void *)&b32 : &bits, size);
    return CKPT_OK;
}

/* A key-value is kept in GGUF's own encoding, little-endian whatever the
 * file's order: its type and payload, as a GGUF output writes them after
 * the key (ckpt__gguf_encoding).  Its typed JSON (ckpt_kv.json, the
 * metadata map) is written from those bytes only when a caller asks. */
typedef struct value_ctx {
    cursor *c;
    ckpt__arena *arena;
    const char *key;
    ckpt__buf enc;      /* the value's encoding */
    size_t enc_charged; /* its capacity charged to the arena's budget */
} value_ctx;

/* Smallest bytes an element of this type takes in the file. */
static unsigned min_size(uint32_t t) { return t == T_STRING ? 8 : t == T_ARRAY ? 12 : fixed_size(t); }

/* The head of an array `depth` arrays deep (element type, count, checked),
 * encoded. */
static ckpt_status array_head(value_ctx *v, size_t depth, uint32_t *et, uint64_t *count) {
    cursor *c = v->c;
    uint64_t at = c->pos;
    ckpt_status st;
    if ((st = rd32(c, et, "an array's element type"))) return st;
    if (*et >= T_COUNT)
        return ckpt__fail(c->err, CKPT__D(GGUF_KV_TYPE), c->path, NULL, (int64_t)at,
                          "key '%s': array elements of unknown type %u", v->key, *et);
    if (*et == T_ARRAY && depth + 1 >= CKPT__GGUF_MAX_NESTING)
        return ckpt__fail(c->err, CKPT__D(GGUF_KV_TYPE), c->path, NULL, (int64_t)at,
                          "key '%s': arrays nested more than %d deep", v->key, CKPT__GGUF_MAX_NESTING);
    uint64_t count_at = c->pos;
    if ((st = rd64(c, count, "an array's length"))) return st;
    if (*count > (c->size - c->pos) / min_size(*et))
        return ckpt__fail(c->err, CKPT__D(GGUF_COUNT), c->path, NULL, (int64_t)count_at,
                          "key '%s': array of %llu %s elements cannot fit in the %llu bytes left in the file",
                          v->key, (unsigned long long)*count, type_names[*et], (unsigned long long)(c->size - c->pos));
    ckpt__put_le(&v->enc, *et, 4);
    ckpt__put_le(&v->enc, *count, 8);
    return CKPT_OK;
}

/* An array being read, or written as JSON: its element type, length and
 * elements done. */
typedef struct open_array {
    uint32_t et;
    uint64_t count, done;
} open_array;

/* An array's elements, encoded (and the top array's fixed-size elements
 * into `data`); arrays of arrays are followed on a heap stack. */
static ckpt_status read_elements(value_ctx *v, uint32_t et, uint64_t count, unsigned char *data) {
    cursor *c = v->c;
    ckpt__buf *enc = &v->enc;
    ckpt__stack open = CKPT__STACK(open_array);
    open_array *a = ckpt__stack_push(&open);
    ckpt_status st = a ? CKPT_OK : ckpt__oom(c->err, c->path, v->key);
    if (a) *a = (open_array){et, count, 0};
    while (st == CKPT_OK && (a = ckpt__stack_top(&open))) {
        if (a->done == a->count) {
            ckpt__stack_pop(&open);
            continue;
        }
        uint64_t k = a->done++;
        unsigned size = fixed_size(a->et);
        if (size) {
            ckpt_kv n;
            if ((st = read_number(c, a->et, &n, enc, data && open.len == 1 ? data + k * size : NULL,
                                  "an array element")))
                break;
        } else if (a->et == T_STRING) {
            const char *s;
            uint64_t len;
            if ((st = rd_string(c, NULL, "a string in an array", &s, &len))) break;
            ckpt__put_le(enc, len, 8);
            ckpt__buf_append(enc, s, (size_t)len);
        } else {
            uint32_t inner;
            uint64_t n;
            if ((st = array_head(v, open.len, &inner, &n))) break;
            if (!(a = ckpt__stack_push(&open))) st = ckpt__oom(c->err, c->path, v->key);
            else *a = (open_array){inner, n, 0};
        }
        if (st == CKPT_OK)
            st = ckpt__budget_charge_buf(v->arena->budget, enc, &v->enc_charged, c->err, c->path, (int64_t)c->pos);
        if (st == CKPT_OK && enc->failed) st = ckpt__oom(c->err, c->path, v->key);
    }
    ckpt__stack_free(&open);
    return st;
}

/* Reads a key's value of `type`, encoded into v->enc, and fills the
 * public fields. */
static ckpt_status read_value(value_ctx *v, uint32_t type, ckpt_kv *kv) {
    cursor *c = v->c;
    ckpt__buf *enc = &v->enc;
    ckpt_status st;
    ckpt__put_le(enc, type, 4);
    if (type == T_ARRAY) {
        uint32_t et;
        uint64_t count;
        if ((st = array_head(v, 0, &et, &count))) return st;
        unsigned size = fixed_size(et);
        unsigned char *data = NULL;
        if (size) {
            data = ckpt__arena_alloc(v->arena, count ? (size_t)(count * size) : 1);
            if (!data) return ckpt__oom(c->err, c->path, v->key);
        }
        if ((st = read_elements(v, et, count, data))) return st;
        kv->element_type = (ckpt_kv_type)et, kv->count = count, kv->data = data;
        return enc->failed ? ckpt__oom(c->err, c->path, v->key) : CKPT_OK;
    }
    if (type == T_STRING) {
        const char *s;
        uint64_t len;
        if ((st = rd_string(c, v->arena, "a string value", &s, &len))) return st;
        ckpt__put_le(enc, len, 8);
        ckpt__buf_append(enc, s, (size_t)len);
        kv->string = s, kv->string_len = len, kv->count = 1;
    } else {
        if ((st = read_number(c, type, kv, enc, NULL, "a value"))) return st;
        kv->count = 1;
    }
    return enc->failed ? ckpt__oom(c->err, c->path, v->key) : CKPT_OK;
}

/* ---- a key-value's typed JSON, from its encoding ------------------------------ */

const char ckpt__gguf_encoding[] = "gguf";

/* One scalar or string of `type` at the cursor, as JSON. */
static void json_element(ckpt__buf *b, ckpt__rd *r, uint32_t type) {
    if (type == T_STRING) {
        uint64_t len = ckpt__rd_u64(r);
        const unsigned char *s = ckpt__rd_bytes(r, (size_t)len);
        if (s) ckpt__buf_json_string_n(b, (const char *)s, (size_t)len);
        return;
    }
    ckpt_kv n;
    scalar_numbers(&n, type, ckpt__rd_le(r, fixed_size(type)));
    json_number(b, type, &n);
}

/* The typed JSON of a value's encoding (which the reader wrote, so every
 * read is in bounds): {"gguf_type": t, "value": v}, an array's
 * {"gguf_type": "array", "element": et, "value": [...]} with its inner
 * arrays typed the same way; arrays of arrays on a heap stack. */
static void encoding_json(ckpt__buf *b, ckpt__rd *r) {
    ckpt__stack open = CKPT__STACK(open_array);
    uint32_t type = ckpt__rd_u32(r);
    open_array *a = NULL;
    for (;;) {
        if (type != UINT32_MAX) { /* a typed value starts (the top one, or an array's element array) */
            ckpt__buf_puts(b, "{\"" CKPT_GGUF_TYPE_KEY "\": \"");
            ckpt__buf_puts(b, type_names[type]);
            if (type == T_ARRAY) {
                uint32_t et = ckpt__rd_u32(r);
                uint64_t count = ckpt__rd_u64(r);
                ckpt__buf_puts(b, "\", \"element\": \"");
                ckpt__buf_puts(b, type_names[et]);
                ckpt__buf_puts(b, "\", \"value\": [");
                if (!(a = ckpt__stack_push(&open))) {
                    b->failed = true;
                    break;
                }
                *a = (open_array){et, count, 0};
            } else {
                ckpt__buf_puts(b, "\", \"value\": ");
                json_element(b, r, type);
                ckpt__buf_puts(b, "}");
            }
        }
        type = UINT32_MAX;
        if (!(a = ckpt__stack_top(&open))) break;
        if (a->done == a->count) {
            ckpt__buf_puts(b, "]}");
            ckpt__stack_pop(&open);
            continue;
        }
        if (a->done++) ckpt__buf_puts(b, ", ");
        if (a->et == T_ARRAY) type = T_ARRAY;
        else json_element(b, r, a->et);
    }
    ckpt__stack_free(&open);
}

char *ckpt__gguf_kv_json(const ckpt__encoded *e) {
    ckpt__buf b = {0};
    ckpt__rd r = ckpt__rd_over(e->bytes, e->len, 0);
    encoding_json(&b, &r);
    if (r.bad) b.failed = true;
    return ckpt__buf_text(&b);
}

/* ---- a file's header ---------------------------------------------------------- */

typedef struct tinfo {
    const char *name;
    ckpt_dtype dtype;
    uint32_t ndim;
    uint64_t *shape; /* arena, outermost first */
    uint64_t offset; /* relative to the data */
    uint64_t nbytes;
    uint64_t info_at; /* where its info starts in the file */
} tinfo;

typedef struct header {
    ckpt_kv *kvs;
    ckpt__encoded *values; /* each key-value's value, encoded */
    size_t kv_count;
    tinfo *tensors;
    size_t count;
    uint64_t data_start;
    uint32_t alignment;
    bool big_endian;
    /* split keys (-1 when absent) */
    int64_t split_no, split_count, split_tensors;
} header;

static void header_free(header *h) {
    free(h->kvs); /* values: in the arena, the catalog's */
    free(h->tensors);
    memset(h, 0, sizeof *h);
}

static const ckpt_kv *find_kv(const header *h, const char *key) {
    for (size_t i = 0; i < h->kv_count; i++)
        if (strcmp(h->kvs[i].key, key) == 0) return &h->kvs[i];
    return NULL;
}

static int by_offset(const void *a, const void *b) {
    const tinfo *x = *(tinfo *const *)a, *y = *(tinfo *const *)b;
    return x->offset < y->offset ? -1 : x->offset > y->offset;
}

/* Each byte-swapped unit of a block type in a big-endian file, as
 * gguf-py's gguf_convert_endian swaps them (other block types it refuses). */
static bool swappable_block(ckpt_dtype d) {
    return d == CKPT_Q4_0 || d == CKPT_Q8_0 || d == CKPT_Q4_K || d == CKPT_Q6_K || d == CKPT_MXFP4 || d == CKPT_NVFP4;
}

/* The phases of reading a header, as ggml's gguf_init_from_reader reads
 * it: the magic and counts, the key-values, the keys the readers insist
 * on, the tensor infos, then the data's extents.  Each returns a status
 * whose error names the byte where the file goes wrong. */
typedef struct reading {
    cursor c;
    ckpt__arena *arena;
    header *h;
    uint64_t n_tensors, n_kv;
    ckpt__name_table keys, names; /* over h->kvs[].key and h->tensors[].name */
} reading;

/* Magic, version (its byte order tells the file's) and the two counts. */
static ckpt_status read_preamble(reading *r) {
    cursor *c = &r->c;
    unsigned char magic[4];
    uint32_t version;
    ckpt_status st;
    if ((st = take(c, magic, 4, "the magic"))) return st;
    if (memcmp(magic, "GGUF", 4) != 0)
        return ckpt__fail(c->err, CKPT_E_UNKNOWN_FORMAT, c->path, NULL, 0, "does not start with the GGUF magic");
    if ((st = rd32(c, &version, "the version"))) return st;
    if ((version & 0xFFFF) == 0) { /* written big-endian */
        c->swap = r->h->big_endian = true;
        version = __builtin_bswap32(version);
    }
    if (version != 2 && version != 3)
        return ckpt__fail(c->err, CKPT__D(GGUF_VERSION), c->path, NULL, 4,
                          version == 1 ? "GGUF version 1 is not supported (versions 2 and 3 are)"
                                       : "GGUF version %lu is not supported (versions 2 and 3 are)",
                          (unsigned long)version);
    if ((st = rd64(c, &r->n_tensors, "the tensor count")) || (st = rd64(c, &r->n_kv, "the key-value count"))) return st;
    /* A tensor info takes 24 bytes at least, a key-value 13. */
    if (r->n_kv > (c->size - c->pos) / 13)
        return ckpt__fail(c->err, CKPT__D(GGUF_COUNT), c->path, NULL, 16, "%llu key-values cannot fit in a %llu-byte file",
                          (unsigned long long)r->n_kv, (unsigned long long)c->size);
    if (r->n_tensors > (c->size - c->pos) / 24)
        return ckpt__fail(c->err, CKPT__D(GGUF_COUNT), c->path, NULL, 8, "%llu tensors cannot fit in a %llu-byte file",
                          (unsigned long long)r->n_tensors, (unsigned long long)c->size);
    return CKPT_OK;
}

/* The tables, counted before they are made (13 bytes can declare a
 * key-value of ~100 bytes here, 24 a tensor of ~60). */
static ckpt_status make_tables(reading *r) {
    header *h = r->h;
    size_t kvs = r->n_kv ? (size_t)r->n_kv : 1, tensors = r->n_tensors ? (size_t)r->n_tensors : 1;
    ckpt_status st = ckpt__budget_charge(
        r->arena->budget, r->n_kv * (sizeof *h->kvs + sizeof *h->values + 8) + r->n_tensors * (sizeof *h->tensors + ckpt__cat_tensor_cost(1)),
        r->c.err, r->c.path, 8);
    if (st) return st;
    h->kvs = ckpt__calloc(kvs, sizeof *h->kvs);
    h->tensors = ckpt__calloc(tensors, sizeof *h->tensors);
    if (!h->kvs || !h->tensors || !(h->values = ckpt__arena_alloc(r->arena, kvs * sizeof *h->values)) || !ckpt__name_table_init(&r->keys, kvs) || !ckpt__name_table_init(&r->names, tensors))
        return ckpt__oom(r->c.err, r->c.path, "the header");
    return CKPT_OK;
}

/* A value's encoding, kept in the arena where it was built (trimmed to its
 * length), as key-value i's value. */
static ckpt_status keep_encoding(reading *r, value_ctx *v, ckpt_kv *kv, ckpt__encoded *out) {
    cursor *c = &r->c;
    ckpt_status st = ckpt__budget_charge_buf(r->arena->budget, &v->enc, &v->enc_charged, c->err, c->path, (int64_t)c->pos);
    unsigned char *fit = st == CKPT_OK ? ckpt__realloc(v->enc.data, v->enc.len) : NULL;
    if (fit) v->enc.data = NULL;
    if (st == CKPT_OK && (!fit || !ckpt__arena_adopt(r->arena, fit))) st = ckpt__oom(c->err, c->path, kv->key);
    *out = (ckpt__encoded){ckpt__gguf_encoding, fit, v->enc.len, ckpt__gguf_kv_json};
    return st;
}

/* Key-value i: its key (unique, not empty), type and value. */
static ckpt_status read_kv(reading *r, uint64_t i) {
    cursor *c = &r->c;
    header *h = r->h;
    uint64_t at = c->pos, klen;
    ckpt_kv *kv = &h->kvs[h->kv_count];
    uint32_t type;
    ckpt_status st;
    if ((st = rd_string(c, r->arena, "a key", &kv->key, &klen))) return st;
    if (klen == 0)
        return ckpt__fail(c->err, CKPT__D(GGUF_LENGTH), c->path, NULL, (int64_t)at, "key-value %llu has an empty key",
                          (unsigned long long)i);
    /* a hash of the keys: a million of them are checked in a blink, not hours */
    if (!ckpt__name_table_insert(&r->keys, &h->kvs[0].key, sizeof *h->kvs, (uint32_t)h->kv_count, NULL))
        return ckpt__fail(c->err, CKPT__D(DUPLICATE_NAME), c->path, NULL, (int64_t)at, "key '%s' appears twice", kv->key);
    uint64_t type_at = c->pos;
    if ((st = rd32(c, &type, "a value type"))) return st;
    if (type >= T_COUNT)
        return ckpt__fail(c->err, CKPT__D(GGUF_KV_TYPE), c->path, NULL, (int64_t)type_at,
                          "key '%s' has unknown value type %lu", kv->key, (unsigned long)type);
    kv->type = (ckpt_kv_type)type;
    value_ctx v = {c, r->arena, kv->key};
    st = read_value(&v, type, kv);
    if (st == CKPT_OK) st = keep_encoding(r, &v, kv, &h->values[h->kv_count]);
    free(v.enc.data);
    if (st == CKPT_OK) h->kv_count++;
    return st;
}

/* Keys whose type the readers insist on: the alignment, and gguf-split's. */
static ckpt_status read_known_keys(reading *r) {
    header *h = r->h;
    const cursor *c = &r->c;
    h->alignment = CKPT__GGUF_DEFAULT_ALIGNMENT;
    const ckpt_kv *a = find_kv(h, "general.alignment");
    if (a && a->type != CKPT_KV_U32)
        return ckpt__fail(c->err, CKPT__D(GGUF_KV_TYPE), c->path, NULL, -1, "general.alignment is a %s, not a u32",
                          type_names[a->type]);
    if (a && (a->u == 0 || (a->u & (a->u - 1)) != 0))
        return ckpt__fail(c->err, CKPT__D(GGUF_ALIGNMENT), c->path, NULL, -1,
                          "general.alignment %llu is not a non-zero power of two", (unsigned long long)a->u);
    if (a) h->alignment = (uint32_t)a->u;
    static const struct { const char *key; uint32_t type; } split_keys[] = {
        {"split.no", T_U16}, {"split.count", T_U16}, {"split.tensors.count", T_I32}};
    int64_t *split_values[] = {&h->split_no, &h->split_count, &h->split_tensors};
    for (int k = 0; k < 3; k++) {
        const ckpt_kv *s = find_kv(h, split_keys[k].key);
        if (!s) continue;
        if ((uint32_t)s->type != split_keys[k].type)
            return ckpt__fail(c->err, CKPT__D(GGUF_KV_TYPE), c->path, NULL, -1, "%s is a %s, not a %s (as gguf-split writes it)",
                              split_keys[k].key, type_names[s->type], type_names[split_keys[k].type]);
        *split_values[k] = s->i;
    }
    return CKPT_OK;
}

/* A tensor's dimension count and dimensions (ggml lists the innermost first). */
static ckpt_status read_shape(reading *r, tinfo *t) {
    cursor *c = &r->c;
    uint64_t dims_at = c->pos;
    ckpt_status st = rd32(c, &t->ndim, "a tensor's dimension count");
    if (st) return st;
    if (t->ndim > CKPT__GGUF_MAX_DIMS)
        return ckpt__fail(c->err, CKPT__D(GGUF_DIMS), c->path, t->name, (int64_t)dims_at,
                          "%lu dimensions, more than ggml's %d", (unsigned long)t->ndim, CKPT__GGUF_MAX_DIMS);
    t->shape = ckpt__arena_alloc(r->arena, (t->ndim ? t->ndim : 1) * sizeof(uint64_t));
    if (!t->shape) return ckpt__oom(c->err, c->path, t->name);
    for (uint32_t d = 0; d < t->ndim; d++) {
        uint64_t ne;
        if ((st = rd64(c, &ne, "a tensor dimension"))) return st;
        if (ne > (uint64_t)INT64_MAX)
            return ckpt__fail(c->err, CKPT__D(GGUF_DIMS), c->path, t->name, (int64_t)(c->pos - 8),
                              "dimension %lu is %llu, more than ggml's int64", (unsigned long)d, (unsigned long long)ne);
        t->shape[t->ndim - 1 - d] = ne;
    }
    return CKPT_OK;
}

/* Whether a tensor's shape and type make a size this reader can serve
 * (`dims_at` and `type_at`: where its dimensions and type are written). */
static ckpt_status size_tensor(reading *r, tinfo *t, uint64_t dims_at, uint64_t type_at) {
    const cursor *c = &r->c;
    uint64_t numel;
    ckpt_status st;
    if (!ckpt__shape_numel(t->ndim, t->shape, &numel))
        return ckpt__fail(c->err, CKPT__D(SHAPE_OVERFLOW), c->path, t->name, (int64_t)dims_at, "product of the shape overflows");
    if (ckpt_dtype_is_block(t->dtype) && !ckpt__block_rows_ok(t->dtype, t->ndim, t->shape))
        return ckpt__fail(c->err, CKPT__D(GGUF_DIMS), c->path, t->name, (int64_t)dims_at,
                          "rows of %llu elements are not whole %s blocks of %u",
                          (unsigned long long)(t->ndim ? t->shape[t->ndim - 1] : 1), ckpt_dtype_name(t->dtype),
                          ckpt_dtype_block_elems(t->dtype));
    if ((st = ckpt__tensor_size(t->dtype, t->ndim, t->shape, &numel, &t->nbytes)))
        return ckpt__fail(c->err, st, c->path, t->name, (int64_t)dims_at, "%llu elements of %s: %s", (unsigned long long)numel,
                          ckpt_dtype_name(t->dtype), ckpt_status_message(st));
    if (r->h->big_endian && ckpt_dtype_is_block(t->dtype) && !swappable_block(t->dtype))
        return ckpt__fail(c->err, CKPT__D(UNSUPPORTED_DTYPE), c->path, t->name, (int64_t)type_at,
                          "a big-endian %s tensor: gguf-py's byte order converter defines big-endian blocks only "
                          "for Q4_0, Q8_0, Q4_K, Q6_K, MXFP4 and NVFP4", ckpt_dtype_name(t->dtype));
    return CKPT_OK;
}

/* A tensor info: name (unique), shape, type and data offset. */
static ckpt_status read_tensor_info(reading *r) {
    cursor *c = &r->c;
    header *h = r->h;
    tinfo *t = &h->tensors[h->count];
    uint32_t type, first;
    ckpt_status st;
    t->info_at = c->pos;
    if ((st = rd_string(c, r->arena, "a tensor name", &t->name, NULL))) return st;
    uint64_t dims_at = c->pos;
    if ((st = read_shape(r, t))) return st;
    uint64_t type_at = c->pos;
    if ((st = rd32(c, &type, "a tensor's type"))) return st;
    t->dtype = ckpt_dtype_from_ggml_type(type);
    if (t->dtype == CKPT_DTYPE_INVALID)
        return ckpt__fail(c->err, CKPT__D(GGUF_TENSOR_TYPE), c->path, t->name, (int64_t)type_at, "unknown ggml type %lu",
                          (unsigned long)type);
    if ((st = rd64(c, &t->offset, "a tensor's offset")) || (st = size_tensor(r, t, dims_at, type_at))) return st;
    if (!ckpt__name_table_insert(&r->names, &h->tensors[0].name, sizeof *h->tensors, (uint32_t)h->count, &first))
        return ckpt__fail(c->err, CKPT__D(DUPLICATE_NAME), c->path, t->name, (int64_t)t->info_at,
                          "tensor name appears twice (first at byte %llu)", (unsigned long long)h->tensors[first].info_at);
    h->count++;
    return CKPT_OK;
}

/* Each tensor's data inside the data section, aligned, and apart from the
 * others'; `order` has room for a pointer per tensor. */
static ckpt_status check_extents(reading *r, const tinfo **order) {
    const header *h = r->h;
    const cursor *c = &r->c;
    uint64_t size = r->c.size, data_size = size > h->data_start ? size - h->data_start : 0;
    for (size_t i = 0; i < h->count; i++) {
        const tinfo *t = order[i] = &h->tensors[i];
        int64_t at = (int64_t)t->info_at;
        if (t->offset % h->alignment)
            return ckpt__fail(c->err, CKPT__D(GGUF_ALIGNMENT), c->path, t->name, at,
                              "data offset %llu is not a multiple of the alignment %lu", (unsigned long long)t->offset,
                              (unsigned long)h->alignment);
        if (t->offset > data_size)
            return ckpt__fail(c->err, CKPT__D(GGUF_OFFSET), c->path, t->name, at,
                              "data offset %llu is past the end of the %llu-byte data section",
                              (unsigned long long)t->offset, (unsigned long long)data_size);
        if (t->nbytes > data_size - t->offset)
            return ckpt__fail(c->err, CKPT_E_TRUNCATED, c->path, t->name, (int64_t)size,
                              "file ends %llu bytes before the end of this tensor's data",
                              (unsigned long long)(t->nbytes - (data_size - t->offset)));
    }
    if (h->count) qsort(order, h->count, sizeof *order, by_offset);
    for (size_t i = 1; i < h->count; i++) {
        const tinfo *p = order[i - 1], *t = order[i];
        if (t->nbytes && p->offset + p->nbytes > t->offset)
            return ckpt__fail(c->err, CKPT__D(GGUF_OFFSET), c->path, t->name, (int64_t)(h->data_start + t->offset),
                              "data [%llu, %llu) overlaps '%s', which ends at %llu", (unsigned long long)t->offset,
                              (unsigned long long)(t->offset + t->nbytes), p->name,
                              (unsigned long long)(p->offset + p->nbytes));
    }
    return CKPT_OK;
}

/* The data section: it starts at the next multiple of the alignment. */
static ckpt_status read_data_section(reading *r) {
    header *h = r->h;
    uint64_t pos = r->c.pos, size = r->c.size;
    h->data_start = pos + (h->alignment - pos % h->alignment) % h->alignment;
    if (h->count && h->data_start > size)
        return ckpt__fail(r->c.err, CKPT_E_TRUNCATED, r->c.path, NULL, (int64_t)size,
                          "file ends before its data section, which starts at byte %llu",
                          (unsigned long long)h->data_start);
    const tinfo **order = ckpt__malloc((h->count ? h->count : 1) * sizeof *order);
    if (!order) return ckpt__oom(r->c.err, r->c.path, NULL);
    ckpt_status st = check_extents(r, order);
    free(order);
    return st;
}

static ckpt_status read_header(ckpt__source *src, ckpt__arena *arena, header *h, ckpt_error *err) {
    memset(h, 0, sizeof *h);
    h->split_no = h->split_count = h->split_tensors = -1;
    size_t cap = src->caps & CKPT__SRC_REMOTE ? CURSOR_CHUNK_REMOTE : CURSOR_CHUNK;
    reading r = {.c = {.src = src, .path = src->name, .size = src->size, .err = err, .cap = cap, .fill = CURSOR_FIRST},
                 .arena = arena, .h = h};
    r.c.buf = ckpt__malloc(r.c.cap);
    ckpt_status st = r.c.buf ? read_preamble(&r) : ckpt__oom(err, src->name, "the header buffer");
    if (st == CKPT_OK) st = make_tables(&r);
    for (uint64_t i = 0; st == CKPT_OK && i < r.n_kv; i++) st = read_kv(&r, i);
    if (st == CKPT_OK) st = read_known_keys(&r);
    for (uint64_t i = 0; st == CKPT_OK && i < r.n_tensors; i++) st = read_tensor_info(&r);
    if (st == CKPT_OK) st = read_data_section(&r);
    free(r.c.buf);
    free(r.c.scratch);
    ckpt__name_table_free(&r.keys);
    ckpt__name_table_free(&r.names);
    if (st) header_free(h);
    return st;
}

/* ---- the format ---------------------------------------------------------------- */

static ckpt_status add_tensors(ckpt_catalog *c, uint32_t file, const header *h, ckpt_error *err) {
    for (size_t i = 0; i < h->count; i++) {
        const tinfo *t = &h->tensors[i];
        ckpt__piece piece = {.file = file, .offset = h->data_start + t->offset};
        piece.big_endian = h->big_endian && (ckpt_dtype_is_block(t->dtype) || ckpt_dtype_bits(t->dtype) > 8);
        ckpt__tensor_decl d = {.name = t->name, .dtype = t->dtype, .ndim = t->ndim, .shape = t->shape,
                               .storage = CKPT__OWN_STORAGE, .pieces = &piece, .piece_count = 1};
        ckpt_status st = ckpt__cat_add_tensor(c, &d, err);
        if (st) return st;
    }
    return CKPT_OK;
}

/* The prefix of a first part "<prefix>-00001-of-NNNNN.gguf", or false. */
static bool split_prefix(const char *path, int64_t count, char **prefix) {
    char tail[64];
    snprintf(tail, sizeof tail, "-00001-of-%05lld.gguf", (long long)count);
    size_t n = strlen(path), k = strlen(tail);
    if (n <= k || strcmp(path + n - k, tail) != 0) return false;
    *prefix = ckpt__strndup(path, n - k);
    return *prefix != NULL;
}

static ckpt_status gguf_open(ckpt_catalog *c, ckpt__source *src, ckpt_error *err) {
    header h;
    ckpt__arena *arena = ckpt__cat_arena(c);
    ckpt_status st = read_header(src, arena, &h, err);
    if (st) {
        ckpt__source_close(src);
        return st;
    }
    char *path = ckpt__strdup(src->name);
    uint32_t file;
    if (!path) {
        header_free(&h);
        ckpt__source_close(src);
        return ckpt__oom(err, NULL, NULL);
    }
    if ((st = ckpt__cat_add_source(c, src, &file, err))) goto done;
    ckpt__cat_set_format(c, CKPT_FORMAT_GGUF);
    for (size_t i = 0; i < h.kv_count && st == CKPT_OK; i++) {
        const ckpt_kv *kv = &h.kvs[i];
        st = ckpt__cat_add_kv(c, kv, &h.values[i], err);
        /* a string as itself; other values encoded, their text written when asked */
        if (st == CKPT_OK && kv->type == CKPT_KV_STRING) st = ckpt__cat_add_metadata(c, file, kv->key, kv->string, err);
        else if (st == CKPT_OK) st = ckpt__cat_add_metadata_value(c, file, kv->key, &h.values[i], err);
    }
    if (st) goto done;
    if (h.split_count > 1 || (h.split_no > 0)) {
        char *prefix = NULL;
        if (h.split_no != 0)
            st = ckpt__fail(err, CKPT__D(GGUF_SPLIT), path, NULL, -1,
                            "is part %lld of a split GGUF: open its first part (-00001-of-%05lld.gguf)",
                            (long long)h.split_no + 1, (long long)h.split_count);
        else if (!split_prefix(path, h.split_count, &prefix))
            st = ckpt__fail(err, CKPT__D(GGUF_SPLIT), path, NULL, -1,
                            "split.count is %lld but the file is not named like a first part (-00001-of-%05lld.gguf), "
                            "so its other parts cannot be found",
                            (long long)h.split_count, (long long)h.split_count);
        uint64_t total = h.count;
        if (st == CKPT_OK) st = add_tensors(c, file, &h, err);
        for (int64_t part = 1; st == CKPT_OK && part < h.split_count; part++) {
            char name[96];
            snprintf(name, sizeof name, "-%05lld-of-%05lld.gguf", (long long)part + 1, (long long)h.split_count);
            char *part_path = ckpt__malloc(strlen(prefix) + strlen(name) + 1);
            if (!part_path) {
                st = ckpt__oom(err, path, NULL);
                break;
            }
            strcpy(part_path, prefix);
            strcat(part_path, name);
            ckpt__source *ps;
            header ph;
            st = ckpt__cat_open_source(c, part_path, &ps, err);
            if (st == CKPT_OK) {
                st = read_header(ps, arena, &ph, err);
                if (st) ckpt__source_close(ps);
            }
            if (st == CKPT_OK) {
                if (ph.split_no != part || ph.split_count != h.split_count)
                    st = ckpt__fail(err, CKPT__D(GGUF_SPLIT), part_path, NULL, -1,
                                    "split.no is %lld and split.count %lld; part %lld of %lld expected",
                                    (long long)ph.split_no, (long long)ph.split_count, (long long)part,
                                    (long long)h.split_count);
                uint32_t pf = 0;
                if (st == CKPT_OK) st = ckpt__cat_add_source(c, ps, &pf, err);
                else ckpt__source_close(ps);
                if (st == CKPT_OK) st = add_tensors(c, pf, &ph, err);
                total += ph.count;
                header_free(&ph);
            }
            free(part_path);
        }
        if (st == CKPT_OK && h.split_tensors >= 0 && total != (uint64_t)h.split_tensors)
            st = ckpt__fail(err, CKPT__D(GGUF_SPLIT), path, NULL, -1,
                            "split.tensors.count is %lld but the %lld parts hold %llu tensors", (long long)h.split_tensors,
                            (long long)h.split_count, (unsigned long long)total);
        free(prefix);
    } else {
        st = add_tensors(c, file, &h, err);
    }
done:
    free(path);
    header_free(&h);
    return st;
}

static int gguf_probe(const unsigned char *head, size_t n, const char *name) {
    if (n >= 4 && memcmp(head, "GGUF", 4) == 0) return CKPT__PROBE_MAGIC;
    size_t k = strlen(name);
    return k > 5 && strcmp(name + k - 5, ".gguf") == 0 ? CKPT__PROBE_NAME : CKPT__PROBE_NO;
}

/* gguf-split's first part stands for its set in a directory. */
static bool gguf_first_of_set(const char *name) {
    return ckpt__gguf_is_split_name(name) && strncmp(name + strlen(name) - 20, "-00001-of-", 10) == 0;
}

const ckpt__format ckpt__format_gguf = {"gguf", CKPT_FORMAT_GGUF, gguf_probe, gguf_open, gguf_first_of_set};

/* ---- names of split parts ---------------------------------------------------- */

char *ckpt__gguf_split_path(const char *path, size_t index, size_t count) {
    size_t n = strlen(path);
    if (n > 5 && strcmp(path + n - 5, ".gguf") == 0) n -= 5;
    char tail[64];
    snprintf(tail, sizeof tail, "-%05zu-of-%05zu.gguf", index + 1, count);
    char *out = ckpt__malloc(n + strlen(tail) + 1);
    if (!out) return NULL;
    memcpy(out, path, n);
    strcpy(out + n, tail);
    return out;
}

bool ckpt__gguf_is_split_name(const char *name) {
    size_t n = strlen(name);
    const char *t = name + n;
    if (n < 20 || strcmp(t - 5, ".gguf") != 0) return false;
    t -= 20; /* "-NNNNN-of-NNNNN.gguf" */
    for (int i = 0; i < 20; i++) {
        char ch = t[i];
        bool digit = ch >= '0' && ch <= '9';
        if ((i >= 1 && i <= 5) || (i >= 10 && i <= 14)) {
            if (!digit) return false;
        } else if (i < 10 && ch != "-NNNNN-of-"[i]) {
            return false;
        }
    }
    return true;
}
