/*
 * msgpack.c — Flax's msgpack checkpoints (flax.serialization.to_bytes /
 * msgpack_serialize; transformers' flax_model.msgpack), read without a
 * msgpack library and without reading tensor data.
 *
 * The file is one msgpack value (https://github.com/msgpack/msgpack/blob/
 * master/spec.md), in practice a map of maps whose leaves are extension
 * values of Flax's types (flax/serialization.py, _MsgpackExtType):
 *
 *   ext 1  ndarray       payload = msgpack (shape, dtype.name, bytes):
 *                        an array of ints, a str (or bin), and a bin of the
 *                        row-major, little-endian data (arr.tobytes('C'))
 *   ext 2  complex       payload = msgpack (real, imag)
 *   ext 3  numpy scalar  payload as ext 1, shape ()
 *
 * Arrays over 2**30 bytes are written as a map
 *   {'__msgpack_chunked_array__': True, 'shape': {'0': d0, ...},
 *    'chunks': {'0': ndarray, '1': ndarray, ...}}
 * whose chunks are consecutive ranges of the flattened array; each becomes
 * a few pieces (boxes) of one tensor.  Lists and tuples of a state dict
 * arrive as maps with keys '0', '1', ...; raw msgpack arrays are kept too.
 *
 * Tensors are named by their path, keys joined by "." (ints in decimal),
 * as transformers flattens Flax params.  The document's structure, and its
 * non-tensor values (step counters, hyper-parameters), go into the object
 * tree (ckpt_catalog_tree_json), so dicts keyed "0", "1" stay dicts.
 *
 * Every length is checked against the bytes left in the file (or in the
 * enclosing extension), nesting and the number of values are bounded, and
 * strings must be UTF-8.
 *
 * Written (the output format at the bottom) as transformers saves Flax
 * params, to_bytes(unflatten_dict(tensors, sep=".")): names split at dots
 * into nested maps (in the order names first appear), each tensor an
 * ndarray extension encoded as msgpack-python encodes Flax's tuple.  All
 * of it is known before the data; finish writes what lies between
 * tensors.  A tensor of 4 GiB or more (beyond msgpack's bin32) is refused:
 * Flax's chunked layout would split its bytes.
 */
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../base/cursor.h"
#include "../base/value.h"
#include "../io/file.h"
#include "format.h"
#include "numpy.h"
#include "output.h"

enum {
    MAX_DEPTH = 256,             /* nesting of maps and arrays */
    MAX_NODES = 4000000,         /* values in a document */
    MAX_STRING = 1 << 20,        /* a key or a string value */
    MAX_BIN = 1 << 20,           /* a bin value outside an ndarray (kept in the tree) */
    WINDOW = 64 << 10,
};

enum { EXT_NDARRAY = 1, EXT_COMPLEX = 2, EXT_SCALAR = 3 };

typedef enum kind { N_NIL, N_BOOL, N_INT, N_UINT, N_FLOAT, N_STR, N_BIN, N_ARRAY, N_MAP, N_NDARRAY, N_COMPLEX } kind;

/* A string or bin value (scratch memory, NUL-terminated). */
typedef struct mp_string {
    uint32_t len;
    char data[];
} mp_string;

/* An ndarray extension's payload (scratch memory; the shape lives with the
 * catalog, which keeps it for the tensor). */
typedef struct mp_array {
    ckpt_dtype dtype;
    uint32_t ndim;
    uint64_t *shape;
    uint64_t numel, nbytes, data; /* data: offset in the file */
} mp_array;

/*
 * The document is parsed into one array of 16-byte nodes in document
 * order: an array's items, or a map's keys and values, follow it, and the
 * next value after a container is `seq.size` nodes on.  A nil or a small
 * int costs one node, neither pointers nor a copy (4 MB of nils took 305
 * MB as a tree of 56-byte nodes and item pointers).
 */
typedef struct node {
    uint8_t kind;
    bool scalar;    /* N_NDARRAY from ext 3 (a numpy scalar) */
    uint16_t at_hi; /* offset of its first byte: at_hi << 32 | at_lo */
    uint32_t at_lo;
    union {
        bool b;
        int64_t i;
        uint64_t u;
        double f;
        const mp_string *s;
        struct {
            uint32_t count; /* items of an array, entries of a map (key, value) */
            uint32_t size;  /* nodes of the value, itself included */
        } seq;
        const mp_array *arr;
        const double *c; /* real, imaginary */
    } u;
} node;

static uint64_t node_at(const node *n) { return (uint64_t)n->at_hi << 32 | n->at_lo; }
static bool is_seq(const node *n) { return n->kind == N_ARRAY || n->kind == N_MAP; }
/* The value after n's (its next sibling). */
static const node *skip(const node *n) { return n + (is_seq(n) ? n->u.seq.size : 1); }

typedef struct mp {
    ckpt__source *src;
    const char *path;
    ckpt__arena *arena;   /* the catalog's: tensor shapes */
    ckpt__arena scratch;  /* strings and payloads, until the walk is over */
    ckpt__budget *budget; /* the catalog's */
    ckpt_error *err;
    uint64_t size;
    unsigned char *win;
    uint64_t win_at;
    size_t win_len;
    uint64_t pos;
    node *nodes;
    size_t count, cap;
    uint64_t charged; /* bytes of nodes and scratch charged to the budget */
} mp;

static ckpt_status fail(mp *m, ckpt_status st, uint64_t at, const char *fmt, ...) CKPT__PRINTF(4, 5);
static ckpt_status fail(mp *m, ckpt_status st, uint64_t at, const char *fmt, ...) {
    char detail[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(detail, sizeof detail, fmt, ap);
    va_end(ap);
    return ckpt__fail(m->err, st, m->path, NULL, (int64_t)at, "%s", detail);
}

/* ---- reading ------------------------------------------------------------------ */

/* Makes bytes [pos, pos + n) (n ≤ WINDOW) available at *p, within `limit`. */
static ckpt_status need(mp *m, size_t n, uint64_t limit, const unsigned char **p) {
    if (limit < m->pos || n > limit - m->pos)
        return fail(m, limit == m->size ? CKPT_E_TRUNCATED : CKPT__D(MSGPACK_INVALID), m->pos,
                    limit == m->size ? "the file ends inside a msgpack value (%zu more bytes needed)"
                                     : "a msgpack value runs past the end of its enclosing extension (%zu bytes)",
                    n);
    if (m->pos < m->win_at || m->pos + n > m->win_at + m->win_len) {
        uint64_t left = m->size - m->pos;
        size_t want = left < WINDOW ? (size_t)left : WINDOW;
        ckpt_status st = ckpt__source_read(m->src, m->win, want, m->pos, m->err);
        if (st) return st;
        m->win_at = m->pos;
        m->win_len = want;
    }
    *p = m->win + (m->pos - m->win_at);
    return CKPT_OK;
}

/* An unsigned big-endian field of n bytes. */
static ckpt_status field(mp *m, unsigned n, uint64_t limit, uint64_t *v) {
    const unsigned char *p = NULL;
    ckpt_status st = need(m, n, limit, &p);
    if (st) return st;
    *v = ckpt__load_be(p, n);
    m->pos += n;
    return CKPT_OK;
}

static ckpt_status charge(mp *m, uint64_t bytes, uint64_t at) {
    ckpt_status st = ckpt__budget_charge(m->budget, bytes, m->err, m->path, (int64_t)at);
    if (st == CKPT_OK) m->charged += bytes;
    return st;
}

/* `len` bytes into scratch memory (NUL-terminated). */
static ckpt_status bytes(mp *m, uint64_t len, uint64_t limit, mp_string **out) {
    if (limit < m->pos || len > limit - m->pos)
        return fail(m, limit == m->size ? CKPT_E_TRUNCATED : CKPT__D(MSGPACK_INVALID), m->pos,
                    "%llu bytes of a string or bin run past the end of %s", (unsigned long long)len,
                    limit == m->size ? "the file" : "their enclosing extension");
    ckpt_status st = charge(m, sizeof(mp_string) + len + 1, m->pos);
    if (st) return st;
    mp_string *s = ckpt__arena_alloc(&m->scratch, sizeof *s + (size_t)len + 1);
    if (!s) return ckpt__oom(m->err, m->path, NULL);
    if (len <= WINDOW) {
        const unsigned char *p = NULL;
        if ((st = need(m, (size_t)len, limit, &p))) return st;
        if (len) memcpy(s->data, p, (size_t)len);
    } else if ((st = ckpt__source_read(m->src, s->data, len, m->pos, m->err))) {
        return st;
    }
    s->data[len] = '\0';
    s->len = (uint32_t)len;
    m->pos += len;
    *out = s;
    return CKPT_OK;
}

/* A new node at the end of the array (its index in *i). */
static ckpt_status new_node(mp *m, kind k, uint64_t at, uint32_t *i) {
    if (m->count >= MAX_NODES)
        return fail(m, CKPT_E_LIMIT, at, "the document holds more than %d msgpack values", MAX_NODES);
    if (m->count == m->cap) {
        size_t cap = m->cap ? m->cap * 2 : 1024;
        ckpt_status st = charge(m, (cap - m->cap) * sizeof *m->nodes, at);
        if (st) return st;
        node *n = ckpt__realloc(m->nodes, cap * sizeof *n);
        if (!n) return ckpt__oom(m->err, m->path, NULL);
        m->nodes = n;
        m->cap = cap;
    }
    node *n = &m->nodes[m->count];
    memset(n, 0, sizeof *n);
    n->kind = (uint8_t)k;
    n->at_hi = (uint16_t)(at >> 32);
    n->at_lo = (uint32_t)at;
    *i = (uint32_t)m->count++;
    return CKPT_OK;
}

/* What a value's first byte says: its family, and the number it holds
 * (a length, a count, an integer's bits, a float's) or the width of the
 * field after it that holds that number. */
typedef enum head_kind { H_BAD, H_NIL, H_BOOL, H_UINT, H_INT, H_FLOAT, H_STR, H_BIN, H_ARRAY, H_MAP, H_EXT } head_kind;

typedef struct mp_head {
    head_kind kind;
    unsigned char byte;
    unsigned width; /* bytes of the field that follows; 0: none */
    uint64_t v;     /* integers sign-extended */
} mp_head;

static mp_head classify(unsigned char b) {
    if (b <= 0x7f) return (mp_head){H_UINT, b, 0, b};
    if (b >= 0xe0) return (mp_head){H_INT, b, 0, (uint64_t)(int64_t)(int8_t)b};
    if (b <= 0x8f) return (mp_head){H_MAP, b, 0, b & 0x0fu};
    if (b <= 0x9f) return (mp_head){H_ARRAY, b, 0, b & 0x0fu};
    if (b <= 0xbf) return (mp_head){H_STR, b, 0, b & 0x1fu};
    if (b >= 0xc4 && b <= 0xc6) return (mp_head){H_BIN, b, 1u << (b - 0xc4), 0};
    if (b >= 0xc7 && b <= 0xc9) return (mp_head){H_EXT, b, 1u << (b - 0xc7), 0};
    if (b == 0xca || b == 0xcb) return (mp_head){H_FLOAT, b, b == 0xca ? 4 : 8, 0};
    if (b >= 0xcc && b <= 0xcf) return (mp_head){H_UINT, b, 1u << (b - 0xcc), 0};
    if (b >= 0xd0 && b <= 0xd3) return (mp_head){H_INT, b, 1u << (b - 0xd0), 0};
    if (b >= 0xd4 && b <= 0xd8) return (mp_head){H_EXT, b, 0, 1u << (b - 0xd4)};
    if (b >= 0xd9 && b <= 0xdb) return (mp_head){H_STR, b, 1u << (b - 0xd9), 0};
    if (b == 0xdc || b == 0xdd) return (mp_head){H_ARRAY, b, b == 0xdc ? 2 : 4, 0};
    if (b == 0xde || b == 0xdf) return (mp_head){H_MAP, b, b == 0xde ? 2 : 4, 0};
    return (mp_head){b == 0xc0 ? H_NIL : b == 0xc1 ? H_BAD : H_BOOL, b, 0, b & 1u};
}

/* The head of the value at m->pos, within `limit`.  Its field is read only
 * when its kind is one of `accept` (a bit per kind): a caller refuses what
 * it does not expect before reading past it. */
static ckpt_status read_head(mp *m, uint64_t limit, unsigned accept, mp_head *h) {
    uint64_t b = 0;
    ckpt_status st = field(m, 1, limit, &b);
    if (st) return st;
    *h = classify((unsigned char)b);
    if (!h->width || !(accept >> h->kind & 1)) return CKPT_OK;
    if ((st = field(m, h->width, limit, &h->v))) return st;
    if (h->kind == H_INT && h->width < 8 && (h->v >> (8 * h->width - 1)) & 1) h->v |= ~0ULL << (8 * h->width);
    return CKPT_OK;
}

static double float_of(const mp_head *h) {
    double d;
    memcpy(&d, &h->v, 8);
    return h->width == 4 ? ckpt__f32_from((uint32_t)h->v) : d;
}

enum { ANY = ~0u, NUMBER = 1u << H_UINT | 1u << H_INT | 1u << H_FLOAT, TEXT = 1u << H_STR | 1u << H_BIN };

/* Flax's ndarray payload (shape, dtype name, data) within [pos, end). */
static ckpt_status ndarray(mp *m, uint64_t end, mp_array *n) {
    uint64_t at = m->pos, len;
    mp_head h;
    ckpt_status st = read_head(m, end, 1u << H_ARRAY, &h);
    if (st) return st;
    if (h.kind != H_ARRAY) return fail(m, CKPT__D(MSGPACK_INVALID), at, "ndarray payload is not an array (shape, dtype, data)");
    if (h.v != 3) return fail(m, CKPT__D(MSGPACK_INVALID), at, "ndarray payload has %llu items, not 3", (unsigned long long)h.v);
    /* shape: an array of non-negative ints */
    uint64_t shape_at = m->pos, ndim;
    if ((st = read_head(m, end, 1u << H_ARRAY, &h))) return st;
    if (h.kind != H_ARRAY) return fail(m, CKPT__D(MSGPACK_INVALID), shape_at, "ndarray shape is not an array of integers");
    ndim = h.v;
    if (ndim > CKPT_MAX_DIMS)
        return fail(m, CKPT_E_LIMIT, shape_at, "ndarray has %llu dimensions (at most %d)", (unsigned long long)ndim,
                    CKPT_MAX_DIMS);
    uint64_t *shape = ckpt__arena_alloc(m->arena, (ndim ? (size_t)ndim : 1) * sizeof *shape);
    if (!shape) return ckpt__oom(m->err, m->path, NULL);
    if ((st = charge(m, (ndim ? ndim : 1) * sizeof *shape, shape_at))) return st;
    for (uint64_t d = 0; d < ndim; d++) {
        uint64_t dim_at = m->pos;
        if ((st = read_head(m, end, 1u << H_UINT | 1u << H_INT, &h))) return st;
        bool sized_int = h.kind == H_INT && h.width; /* a negative fixint is no size either */
        if (sized_int && (int64_t)h.v < 0)
            return fail(m, CKPT__D(MSGPACK_INVALID), dim_at, "ndarray shape has a negative size");
        if (h.kind != H_UINT && !sized_int)
            return fail(m, CKPT__D(MSGPACK_INVALID), dim_at, "ndarray shape holds something other than integers");
        shape[d] = h.v;
    }
    /* dtype name: str or bin (Flax reads it raw) */
    uint64_t dtype_at = m->pos;
    if ((st = read_head(m, end, TEXT, &h))) return st;
    if (h.kind != H_STR && h.kind != H_BIN) return fail(m, CKPT__D(MSGPACK_INVALID), dtype_at, "ndarray dtype is not a string");
    len = h.v;
    if (len > 64) return fail(m, CKPT__D(MSGPACK_INVALID), dtype_at, "ndarray dtype name of %llu bytes", (unsigned long long)len);
    mp_string *dtype_name;
    if ((st = bytes(m, len, end, &dtype_name))) return st;
    const char *name = dtype_name->data;
    if (strlen(name) != len) return fail(m, CKPT__D(MSGPACK_INVALID), dtype_at, "ndarray dtype name holds a NUL byte");
    bool big;
    const char *why;
    ckpt_dtype dtype = ckpt__numpy_dtype(name, &big, &why);
    if (dtype == CKPT_DTYPE_INVALID)
        return fail(m, CKPT__D(UNKNOWN_DTYPE), dtype_at, "ndarray dtype '%s': %s", name, why);
    /* data: bin (or str, which Flax would read the same) */
    uint64_t data_at = m->pos;
    if ((st = read_head(m, end, TEXT, &h))) return st;
    if (h.kind != H_STR && h.kind != H_BIN) return fail(m, CKPT__D(MSGPACK_INVALID), data_at, "ndarray data is not a bin");
    len = h.v;
    uint64_t numel, nbytes;
    if (ckpt__tensor_size(dtype, (uint32_t)ndim, shape, &numel, &nbytes))
        return fail(m, CKPT__D(SHAPE_OVERFLOW), shape_at, "ndarray shape's byte count overflows");
    if (len != nbytes)
        return fail(m, CKPT__D(SIZE_MISMATCH), data_at, "ndarray of %llu elements of %s needs %llu bytes; its data holds %llu",
                    (unsigned long long)numel, name, (unsigned long long)nbytes, (unsigned long long)len);
    if (len > end - m->pos)
        return fail(m, end == m->size ? CKPT_E_TRUNCATED : CKPT__D(MSGPACK_INVALID), data_at,
                    "ndarray data of %llu bytes runs past the end of %s", (unsigned long long)len,
                    end == m->size ? "the file" : "its extension");
    *n = (mp_array){dtype, (uint32_t)ndim, shape, numel, nbytes, m->pos};
    m->pos += len;
    if (m->pos != end)
        return fail(m, CKPT__D(MSGPACK_INVALID), m->pos, "%llu bytes after the ndarray payload inside its extension",
                    (unsigned long long)(end - m->pos));
    return CKPT_OK;
}

/* A number inside a complex extension: float, int or uint. */
static ckpt_status complex_part(mp *m, uint64_t end, double *out) {
    uint64_t at = m->pos;
    mp_head h;
    ckpt_status st = read_head(m, end, NUMBER, &h);
    if (st) return st;
    if (h.kind == H_UINT) *out = (double)h.v;
    else if (h.kind == H_INT) *out = (double)(int64_t)h.v;
    else if (h.kind == H_FLOAT) *out = float_of(&h);
    else return fail(m, CKPT__D(MSGPACK_INVALID), at, "complex extension part is not a number");
    return CKPT_OK;
}

/* Flax's complex payload: the array (real, imag) filling [pos, end). */
static ckpt_status complex_value(mp *m, uint64_t at, uint64_t end, node *n) {
    mp_head h;
    ckpt_status st = read_head(m, end, 1u << H_ARRAY, &h);
    if (st) return st;
    uint64_t count = h.kind == H_ARRAY ? h.v : 0;
    double *c = count == 2 ? ckpt__arena_alloc(&m->scratch, 2 * sizeof *c) : NULL;
    if (count == 2 && !c) return ckpt__oom(m->err, m->path, NULL);
    for (int k = 0; count == 2 && k < 2; k++)
        if ((st = complex_part(m, end, &c[k]))) return st;
    if (count != 2 || m->pos != end) return fail(m, CKPT__D(MSGPACK_INVALID), at, "complex extension is not a (real, imag) pair");
    n->kind = N_COMPLEX;
    n->u.c = c;
    return charge(m, 2 * sizeof *c, at);
}

/* An extension of `len` bytes (its type byte next): one of Flax's. */
static ckpt_status ext(mp *m, uint64_t at, uint64_t len, node *n) {
    uint64_t type;
    ckpt_status st = field(m, 1, m->size, &type);
    if (st) return st;
    if (len > m->size - m->pos)
        return fail(m, CKPT_E_TRUNCATED, at, "extension of %llu bytes runs past the end of the file", (unsigned long long)len);
    uint64_t end = m->pos + len;
    switch ((int8_t)type) {
    case EXT_NDARRAY:
    case EXT_SCALAR: {
        mp_array *a = ckpt__arena_alloc(&m->scratch, sizeof *a);
        if (!a) return ckpt__oom(m->err, m->path, NULL);
        if ((st = charge(m, sizeof *a, at)) || (st = ndarray(m, end, a))) return st;
        n->kind = N_NDARRAY;
        n->scalar = (int8_t)type == EXT_SCALAR;
        n->u.arr = a;
        if (n->scalar && a->ndim)
            return fail(m, CKPT__D(MSGPACK_INVALID), at, "numpy scalar extension with a shape of %u dimensions", a->ndim);
        return CKPT_OK;
    }
    case EXT_COMPLEX: return complex_value(m, at, end, n);
    }
    return fail(m, CKPT__D(MSGPACK_INVALID), at,
                "msgpack extension type %d is not one of Flax's (1 ndarray, 2 complex, 3 numpy scalar)", (int8_t)type);
}

/* A string or bin of `len` bytes, into node i. */
static ckpt_status string_node(mp *m, uint32_t i, bool text, uint64_t len) {
    uint64_t at = node_at(&m->nodes[i]);
    if (len > (text ? MAX_STRING : MAX_BIN))
        return text ? fail(m, CKPT_E_LIMIT, at, "string of %llu bytes (at most %d)", (unsigned long long)len, MAX_STRING)
                    : fail(m, CKPT_E_LIMIT, at, "bin value of %llu bytes outside an ndarray (at most %d)",
                           (unsigned long long)len, MAX_BIN);
    mp_string *s;
    ckpt_status st = bytes(m, len, m->size, &s);
    if (st) return st;
    size_t bad = text ? ckpt__utf8_check((const unsigned char *)s->data, (size_t)len) : len;
    if (bad != len) return fail(m, CKPT__D(MSGPACK_INVALID), at, "string is not UTF-8 (byte %zu)", bad);
    m->nodes[i].kind = text ? N_STR : N_BIN, m->nodes[i].u.s = s;
    return CKPT_OK;
}

/* The head of the value at m->pos, into node i: a scalar whole; a map or
 * an array, its number of values still to read into *items. */
static ckpt_status value_head(mp *m, uint32_t i, uint64_t *items) {
    node *n = &m->nodes[i];
    uint64_t at = node_at(n);
    mp_head h;
    ckpt_status st = read_head(m, m->size, ANY, &h);
    if (st) return st;
    *items = 0;
    switch (h.kind) {
    case H_NIL: n->kind = N_NIL; break;
    case H_BOOL: n->kind = N_BOOL, n->u.b = h.v; break;
    case H_UINT: n->kind = N_UINT, n->u.u = h.v; break;
    case H_INT: n->kind = N_INT, n->u.i = (int64_t)h.v; break;
    case H_FLOAT: n->kind = N_FLOAT, n->u.f = float_of(&h); break;
    case H_MAP: n->kind = N_MAP, n->u.seq.count = (uint32_t)h.v, *items = 2 * (uint64_t)n->u.seq.count; break;
    case H_ARRAY: n->kind = N_ARRAY, n->u.seq.count = (uint32_t)h.v, *items = n->u.seq.count; break;
    case H_STR: case H_BIN: return string_node(m, i, h.kind == H_STR, h.v);
    case H_EXT: return ext(m, at, h.v, n);
    case H_BAD: return fail(m, CKPT__D(MSGPACK_INVALID), at, "byte 0x%02x starts no msgpack value", h.byte);
    }
    return CKPT_OK;
}

/* A map or array being read: its node and the values still to come. */
typedef struct open_seq {
    uint32_t node;
    uint64_t left;
} open_seq;

/* The document, value after value; the maps and arrays being read are on
 * a heap stack (at most MAX_DEPTH), never the C stack. */
static ckpt_status parse(mp *m) {
    ckpt__stack open = CKPT__STACK(open_seq);
    ckpt_status st = CKPT_OK;
    do {
        uint32_t i = 0;
        uint64_t items = 0;
        if ((st = new_node(m, N_NIL, m->pos, &i)) || (st = value_head(m, i, &items))) break;
        node *n = &m->nodes[i];
        if (is_seq(n)) {
            if (open.len >= MAX_DEPTH) {
                st = fail(m, CKPT_E_LIMIT, node_at(n), "msgpack values nested deeper than %d", MAX_DEPTH);
                break;
            }
            if (items > m->size - m->pos) { /* each value takes a byte at least */
                st = fail(m, CKPT_E_TRUNCATED, node_at(n), "%s of %llu entries cannot fit in the %llu bytes left",
                          n->kind == N_MAP ? "map" : "array", (unsigned long long)n->u.seq.count,
                          (unsigned long long)(m->size - m->pos));
                break;
            }
            n->u.seq.size = 1;
            open_seq *o = items ? ckpt__stack_push(&open) : NULL;
            if (items && !o) {
                st = ckpt__oom(m->err, m->path, NULL);
                break;
            }
            if (o) {
                *o = (open_seq){i, items};
                continue;
            }
        }
        /* A value is complete: so is every container it was the last of. */
        for (open_seq *o; (o = ckpt__stack_top(&open)) && --o->left == 0; ckpt__stack_pop(&open))
            m->nodes[o->node].u.seq.size = (uint32_t)(m->count - o->node);
    } while (open.len);
    ckpt__stack_free(&open);
    return st;
}

/* ---- the walk: tensors and the object tree --------------------------------------- */

typedef struct walker {
    mp *m;
    ckpt_catalog *c;
    uint32_t file;
    ckpt__buf name;
    ckpt__value **slot; /* where the value being visited goes */
    ckpt_status failed; /* why making a value failed */
    unsigned parts; /* components in name */
    ckpt__piece *pieces;
    size_t piece_cap;
} walker;

/* A value of the tree into *w->slot, charged to the budget at node n. */
static ckpt__value *make(walker *w, const node *n, ckpt__value_kind vk, size_t count, const char *text, size_t len) {
    mp *m = w->m;
    if ((w->failed = ckpt__budget_charge(m->budget, ckpt__value_cost(vk, count, len), m->err, m->path,
                                         (int64_t)node_at(n))))
        return NULL;
    ckpt__arena *a = ckpt__cat_arena(w->c);
    ckpt__value *v = text ? ckpt__value_text(a, vk, text, len) : ckpt__value_new(a, vk, count);
    if (!v) w->failed = ckpt__oom(m->err, m->path, "the object tree");
    return *w->slot = v;
}

/* An integer: INT, or its digits when it is above int64's range. */
static ckpt__value *make_int(walker *w, const node *n) {
    char tmp[32];
    if (n->kind == N_UINT && n->u.u > INT64_MAX) {
        snprintf(tmp, sizeof tmp, "%llu", (unsigned long long)n->u.u);
        return make(w, n, CKPT__V_NUMBER, 0, tmp, strlen(tmp));
    }
    ckpt__value *v = make(w, n, CKPT__V_INT, 0, NULL, 0);
    if (v) v->u.i = n->kind == N_UINT ? (int64_t)n->u.u : n->u.i;
    return v;
}

static ckpt__value *make_float(walker *w, const node *n, double f) {
    ckpt__value *v = make(w, n, CKPT__V_FLOAT, 0, NULL, 0);
    if (v) v->u.f = f;
    return v;
}

static size_t name_push(walker *w, const char *part, size_t n) {
    size_t saved = w->name.len;
    if (w->parts++) ckpt__buf_append(&w->name, ".", 1);
    ckpt__buf_append(&w->name, part, n);
    ckpt__buf_append(&w->name, "", 0);
    return saved;
}

static void name_pop(walker *w, size_t saved) {
    w->parts--;
    w->name.len = saved;
    if (w->name.data) w->name.data[saved] = '\0';
}

/* The value of string key `key` in a map, or NULL. */
static const node *lookup(const node *map, const char *key) {
    const node *k = map + 1;
    for (uint32_t i = 0; i < map->u.seq.count; i++, k = skip(skip(k)))
        if (k->kind == N_STR && !strcmp(k->u.s->data, key)) return skip(k);
    return NULL;
}

/* A map {'0': v0, '1': v1, …} (Flax's tuples) as an array of its values. */
static ckpt_status as_tuple(walker *w, const node *map, const char *what, const node **vals, uint64_t max,
                            uint64_t *count) {
    mp *m = w->m;
    if (!map || map->kind != N_MAP)
        return fail(m, CKPT__D(MSGPACK_INVALID), map ? node_at(map) : 0, "chunked array's '%s' is not a map", what);
    if (map->u.seq.count > max)
        return fail(m, CKPT_E_LIMIT, node_at(map), "chunked array's '%s' has %u entries (at most %llu)", what,
                    map->u.seq.count, (unsigned long long)max);
    for (uint32_t i = 0; i < map->u.seq.count; i++) vals[i] = NULL;
    const node *k = map + 1;
    for (uint32_t i = 0; i < map->u.seq.count; i++, k = skip(skip(k))) {
        char *end = NULL;
        const char *text = k->kind == N_STR ? k->u.s->data : NULL;
        uint32_t len = text ? k->u.s->len : 0;
        unsigned long long idx = text && len && len < 20 && text[0] >= '0' && text[0] <= '9' && (len == 1 || text[0] != '0')
                                     ? strtoull(text, &end, 10)
                                     : ULLONG_MAX;
        if (!end || *end || idx >= map->u.seq.count || vals[idx])
            return fail(m, CKPT__D(MSGPACK_INVALID), node_at(k), "chunked array's '%s' keys are not '0' … '%u'", what,
                        map->u.seq.count - 1);
        vals[idx] = skip(k);
    }
    *count = map->u.seq.count;
    return CKPT_OK;
}

typedef struct boxes {
    walker *w;
    uint32_t ndim;
    const uint64_t *shape;
    uint64_t *inner; /* elements per index of each axis */
    unsigned item;
    size_t count;
} boxes;

static ckpt_status emit_box(boxes *bx, const uint64_t *origin, uint32_t d, uint64_t first, uint64_t n,
                            uint64_t offset) {
    walker *w = bx->w;
    uint64_t *start = ckpt__arena_alloc(ckpt__cat_arena(w->c), 2 * (size_t)bx->ndim * sizeof *start);
    if (!start) return ckpt__oom(w->m->err, w->m->path, w->name.data);
    uint64_t *count = start + bx->ndim;
    for (uint32_t k = 0; k < bx->ndim; k++) {
        if (k < d) start[k] = origin[k], count[k] = 1;
        else if (k == d) start[k] = first, count[k] = n;
        else start[k] = 0, count[k] = bx->shape[k];
    }
    ckpt__piece *grown = ckpt__grow(w->pieces, bx->count, &w->piece_cap, sizeof *grown, 16);
    if (!grown) return ckpt__oom(w->m->err, w->m->path, w->name.data);
    w->pieces = grown;
    w->pieces[bx->count++] = (ckpt__piece){.file = w->file, .offset = offset, .start = start, .count = count};
    return CKPT_OK;
}

/* A part of a chunk still to be cut into boxes: elements [a, b) of the
 * row-major sub-array of axes d… whose data starts at byte `offset`, its
 * axis d − 1 at index `row` (NO_ROW: as it is); or (emit) rows [a, a + b)
 * of axis d, one box. */
typedef struct span {
    uint32_t d;
    bool emit;
    uint64_t a, b, offset, row;
} span;
#define NO_ROW UINT64_MAX

/* Elements [a, b) of the chunk whose data starts at byte `offset`, as at
 * most 2 ndim − 1 boxes: a range is the rest of its first row (cut at the
 * next axis), whole rows, and the start of its last row (cut at the next
 * axis).  The parts wait on a heap stack, last part first. */
static ckpt_status linear(boxes *bx, uint64_t *origin, uint64_t a, uint64_t b, uint64_t offset) {
    ckpt__stack pending = CKPT__STACK(span);
    span *first = ckpt__stack_push(&pending);
    if (!first) return ckpt__oom(bx->w->m->err, bx->w->m->path, NULL);
    *first = (span){0, false, a, b, offset, NO_ROW};
    ckpt_status st = CKPT_OK;
    while (st == CKPT_OK && pending.len) {
        span t = *(span *)ckpt__stack_top(&pending);
        ckpt__stack_pop(&pending);
        if (t.row != NO_ROW) origin[t.d - 1] = t.row;
        if (t.emit || (t.a < t.b && t.d == bx->ndim - 1)) {
            st = emit_box(bx, origin, t.d, t.a, t.emit ? t.b : t.b - t.a, t.offset);
            continue;
        }
        uint64_t r = bx->inner[t.d];
        span parts[3];
        int n = 0;
        a = t.a, b = t.b, offset = t.offset;
        if (a < b && a % r) { /* the head: the rest of row a / r */
            uint64_t row = a / r, stop = (row + 1) * r < b ? (row + 1) * r : b;
            parts[n++] = (span){t.d + 1, false, a - row * r, stop - row * r, offset, row};
            offset += (stop - a) * bx->item;
            a = stop;
        }
        if (a < b && b / r > a / r) { /* whole rows */
            parts[n++] = (span){t.d, true, a / r, b / r - a / r, offset, NO_ROW};
            offset += (b / r * r - a) * bx->item;
            a = b / r * r;
        }
        if (a < b) parts[n++] = (span){t.d + 1, false, 0, b - a, offset, a / r}; /* the tail: the start of row a / r */
        while (n > 0) {
            span *p = ckpt__stack_push(&pending);
            if (!p) {
                st = ckpt__oom(bx->w->m->err, bx->w->m->path, NULL);
                break;
            }
            *p = parts[--n];
        }
    }
    ckpt__stack_free(&pending);
    return st;
}

static ckpt_status add_tensor(walker *w, const char *name, ckpt_dtype dtype, uint32_t ndim, uint64_t *shape,
                              size_t pieces) {
    ckpt__tensor_decl d = {name, dtype, ndim, shape, CKPT__OWN_STORAGE, w->pieces, (uint32_t)pieces};
    return ckpt__cat_add_tensor(w->c, &d, w->m->err);
}

static const char *tensor_name(walker *w) {
    return ckpt__arena_strndup(ckpt__cat_arena(w->c), w->name.data ? w->name.data : "", w->name.len);
}

static ckpt_status emit_tensor_ref(walker *w, const node *n, const char *name) {
    return make(w, n, CKPT__V_TENSOR, 0, name, strlen(name)) ? CKPT_OK : w->failed;
}

static ckpt_status chunked(walker *w, const node *map) {
    mp *m = w->m;
    const char *name = tensor_name(w);
    if (!name) return ckpt__oom(m->err, m->path, NULL);
    const node *dims[CKPT_MAX_DIMS];
    uint64_t ndim, nchunks;
    ckpt_status st = as_tuple(w, lookup(map, "shape"), "shape", dims, CKPT_MAX_DIMS, &ndim);
    if (st) return ckpt__error_in_tensor(m->err, st, name);
    const node *chunks_map = lookup(map, "chunks");
    if (!chunks_map || chunks_map->kind != N_MAP)
        return ckpt__error_in_tensor(m->err, fail(m, CKPT__D(MSGPACK_INVALID), node_at(map), "chunked array has no 'chunks' map"), name);
    const node **chunks = ckpt__malloc((chunks_map->u.seq.count ? chunks_map->u.seq.count : 1) * sizeof *chunks);
    if (!chunks) return ckpt__oom(m->err, m->path, name);
    st = as_tuple(w, chunks_map, "chunks", chunks, UINT32_MAX, &nchunks);
    uint64_t *shape = ckpt__arena_alloc(ckpt__cat_arena(w->c), (ndim ? (size_t)ndim : 1) * 2 * sizeof *shape);
    if (st == CKPT_OK && !shape) st = ckpt__oom(m->err, m->path, name);
    for (uint64_t d = 0; st == CKPT_OK && d < ndim; d++) {
        if (dims[d]->kind == N_UINT) shape[d] = dims[d]->u.u;
        else if (dims[d]->kind == N_INT && dims[d]->u.i >= 0) shape[d] = (uint64_t)dims[d]->u.i;
        else st = fail(m, CKPT__D(MSGPACK_INVALID), node_at(dims[d]), "chunked array's shape holds something other than a size");
    }
    uint64_t numel = 0, total = 0;
    if (st == CKPT_OK && !ckpt__shape_numel((uint32_t)ndim, shape, &numel))
        st = fail(m, CKPT__D(SHAPE_OVERFLOW), node_at(map), "chunked array's shape overflows");
    ckpt_dtype dtype = CKPT_DTYPE_INVALID;
    for (uint64_t k = 0; st == CKPT_OK && k < nchunks; k++) {
        const node *c = chunks[k];
        if (c->kind != N_NDARRAY || c->scalar)
            st = fail(m, CKPT__D(MSGPACK_INVALID), node_at(c), "chunk %llu of a chunked array is not an ndarray", (unsigned long long)k);
        else if (k && c->u.arr->dtype != dtype)
            st = fail(m, CKPT__D(MSGPACK_INVALID), node_at(c), "chunk %llu is %s, chunk 0 %s", (unsigned long long)k,
                      ckpt_dtype_name(c->u.arr->dtype), ckpt_dtype_name(dtype));
        else if (!ckpt__add_u64(total, c->u.arr->numel, &total) || total > numel)
            st = fail(m, CKPT__D(SIZE_MISMATCH), node_at(c), "chunks hold more elements than the shape's %llu",
                      (unsigned long long)numel);
        dtype = c->u.arr->dtype;
    }
    if (st == CKPT_OK && (total != numel || !nchunks))
        st = fail(m, CKPT__D(SIZE_MISMATCH), node_at(map), "chunks hold %llu elements; the shape needs %llu",
                  (unsigned long long)total, (unsigned long long)numel);
    if (st == CKPT_OK && ckpt_dtype_bits(dtype) % 8)
        st = fail(m, CKPT__D(UNKNOWN_DTYPE), node_at(map), "chunked array of a packed dtype");
    size_t pieces = 0;
    if (st == CKPT_OK && (numel == 0 || ndim == 0)) { /* no chunking to undo: one piece, whole */
        w->pieces[0] = (ckpt__piece){.file = w->file, .offset = chunks[0]->u.arr->data};
        pieces = 1;
    } else if (st == CKPT_OK) {
        uint64_t *inner = shape + ndim, origin[CKPT_MAX_DIMS] = {0}, s = 1;
        for (uint64_t d = ndim; d-- > 0;) inner[d] = s, s *= shape[d];
        boxes bx = {w, (uint32_t)ndim, shape, inner, ckpt_dtype_bits(dtype) / 8, 0};
        uint64_t first = 0;
        for (uint64_t k = 0; st == CKPT_OK && k < nchunks; k++) {
            uint64_t n = chunks[k]->u.arr->numel;
            st = linear(&bx, origin, first, first + n, chunks[k]->u.arr->data);
            first += n;
        }
        pieces = bx.count;
    }
    free(chunks);
    if (st == CKPT_OK) st = add_tensor(w, name, dtype, (uint32_t)ndim, shape, pieces);
    if (st == CKPT_OK) st = emit_tensor_ref(w, map, name);
    return st ? ckpt__error_in_tensor(m->err, st, name) : st;
}

/* Its name (a long key repeats in every name under it) and entry. */
static ckpt_status charge_tensor(walker *w, const node *n) {
    return ckpt__budget_charge(w->m->budget, w->name.len + 1 + ckpt__cat_tensor_cost(1), w->m->err, w->m->path,
                               (int64_t)node_at(n));
}

/* The walk keeps the maps and arrays it is inside on a heap stack, never
 * recursing: one frame per open container. */
typedef struct wframe {
    const node *n;
    const node *next; /* the next item, or the next entry's key */
    uint32_t done;    /* items or entries gone through */
    size_t saved;     /* the name's length before the current child's component */
    bool in_child;
    ckpt__value *out; /* n's value, its items being filled */
} wframe;

/* Makes n's value into *w->slot: a leaf (a tensor, a scalar, a chunked
 * array) whole, a container with its frame pushed. */
static ckpt_status visit(walker *w, ckpt__stack *frames, const node *n) {
    mp *m = w->m;
    ckpt_status st;
    ckpt__value *v = NULL;
    switch ((kind)n->kind) {
    case N_NIL: return make(w, n, CKPT__V_NULL, 0, NULL, 0) ? CKPT_OK : w->failed;
    case N_BOOL:
        if ((v = make(w, n, CKPT__V_BOOL, 0, NULL, 0))) v->u.b = n->u.b;
        return v ? CKPT_OK : w->failed;
    case N_INT: case N_UINT: return make_int(w, n) ? CKPT_OK : w->failed;
    case N_FLOAT: return make_float(w, n, n->u.f) ? CKPT_OK : w->failed;
    case N_STR: return make(w, n, CKPT__V_STR, 0, n->u.s->data, n->u.s->len) ? CKPT_OK : w->failed;
    case N_BIN: return make(w, n, CKPT__V_BYTES, 0, n->u.s->data, n->u.s->len) ? CKPT_OK : w->failed;
    case N_COMPLEX: /* builtins.complex(real, imag), as torch pickles one */
        if (!(v = make(w, n, CKPT__V_CALL, 2, NULL, 0))) return w->failed;
        v->cls = "builtins.complex";
        w->slot = &v->u.items[0];
        if (!make_float(w, n, n->u.c[0])) return w->failed;
        w->slot = &v->u.items[1];
        return make_float(w, n, n->u.c[1]) ? CKPT_OK : w->failed;
    case N_NDARRAY: {
        const char *name = tensor_name(w);
        if (!name) return ckpt__oom(m->err, m->path, NULL);
        w->pieces[0] = (ckpt__piece){.file = w->file, .offset = n->u.arr->data};
        if ((st = charge_tensor(w, n)) || (st = add_tensor(w, name, n->u.arr->dtype, n->u.arr->ndim, n->u.arr->shape, 1)))
            return st;
        return emit_tensor_ref(w, n, name);
    }
    case N_MAP:
        if (lookup(n, "__msgpack_chunked_array__")) return (st = charge_tensor(w, n)) ? st : chunked(w, n);
        v = make(w, n, CKPT__V_DICT, n->u.seq.count, NULL, 0);
        break;
    case N_ARRAY: v = make(w, n, CKPT__V_LIST, n->u.seq.count, NULL, 0); break;
    default: return fail(m, CKPT__D(MSGPACK_INVALID), node_at(n), "unexpected value");
    }
    if (!v) return w->failed;
    wframe *f = ckpt__stack_push(frames);
    if (!f) return ckpt__oom(m->err, m->path, NULL);
    *f = (wframe){.n = n, .next = n + 1, .out = v};
    return CKPT_OK;
}

/* The next entry of a map: [key, value], the value under the key's name. */
static ckpt_status next_entry(walker *w, ckpt__stack *frames, wframe *f) {
    mp *m = w->m;
    const node *k = f->next, *v = skip(k);
    char num[32];
    const char *part;
    size_t len;
    w->slot = &f->out->u.items[2 * f->done];
    if (k->kind == N_STR) {
        if (strlen(k->u.s->data) != k->u.s->len) return fail(m, CKPT__D(MSGPACK_INVALID), node_at(k), "map key holds a NUL byte");
        part = k->u.s->data, len = k->u.s->len;
        if (!make(w, k, CKPT__V_STR, 0, part, len)) return w->failed;
    } else if (k->kind == N_INT || k->kind == N_UINT) {
        if (!make_int(w, k)) return w->failed;
        if (k->kind == N_UINT) snprintf(num, sizeof num, "%llu", (unsigned long long)k->u.u);
        else snprintf(num, sizeof num, "%lld", (long long)k->u.i);
        part = num, len = strlen(num);
    } else {
        return fail(m, CKPT__D(MSGPACK_INVALID), node_at(k), "map key is not a string or an integer");
    }
    w->slot = &f->out->u.items[2 * f->done + 1];
    f->next = skip(v);
    f->done++;
    f->in_child = true;
    f->saved = name_push(w, part, len);
    return visit(w, frames, v);
}

/* One step of the top frame: the end of the child it entered, then its
 * next child, or its closing (the frame popped). */
static ckpt_status step(walker *w, ckpt__stack *frames) {
    wframe *f = ckpt__stack_top(frames);
    if (f->in_child) {
        f->in_child = false;
        name_pop(w, f->saved);
    }
    if (f->done == f->n->u.seq.count) {
        ckpt__stack_pop(frames);
        return CKPT_OK;
    }
    if (f->n->kind == N_MAP) return next_entry(w, frames, f);
    char num[16];
    snprintf(num, sizeof num, "%u", f->done);
    w->slot = &f->out->u.items[f->done];
    const node *item = f->next;
    f->next = skip(item);
    f->done++;
    f->in_child = true;
    f->saved = name_push(w, num, strlen(num));
    return visit(w, frames, item);
}

/* Tensors into the catalog, everything into the object tree. */
static ckpt_status walk(walker *w, const node *root, ckpt__value **tree) {
    ckpt__stack frames = CKPT__STACK(wframe);
    w->slot = tree;
    ckpt_status st = visit(w, &frames, root);
    while (st == CKPT_OK && frames.len) st = step(w, &frames);
    ckpt__stack_free(&frames);
    return st;
}

/* ---- the format ------------------------------------------------------------------- */

/* A msgpack map whose first key is a short string: what Flax writes.  A
 * safetensors file starts with its header's length, whose second to
 * eighth bytes are small (mostly zero), never a string's letters. */
static int msgpack_probe(const unsigned char *head, size_t n, const char *name) {
    size_t len = name ? strlen(name) : 0;
    if (len >= 8 && !strcmp(name + len - 8, ".msgpack")) return CKPT__PROBE_NAME;
    if (n < 4 || !((head[0] >= 0x81 && head[0] <= 0x8f) || head[0] == 0xde || head[0] == 0xdf)) return CKPT__PROBE_NO;
    size_t i = head[0] == 0xde ? 3 : head[0] == 0xdf ? 5 : 1, k;
    if (i >= n) return CKPT__PROBE_NO;
    if (head[i] >= 0xa1 && head[i] <= 0xbf) k = head[i] & 0x1f, i++;
    else if (head[i] == 0xd9 && i + 1 < n) k = head[i + 1], i += 2;
    else return CKPT__PROBE_NO;
    if (k == 0 || i + k >= n) return CKPT__PROBE_NO;
    for (size_t a = i; a < i + k; a++)
        if (head[a] < 0x20 || head[a] == 0x7f) return CKPT__PROBE_NO;
    unsigned char v = head[i + k]; /* the first value: a map, an ext, or a chunked array's True */
    bool value = (v >= 0x80 && v <= 0x8f) || v == 0xde || v == 0xdf || (v >= 0xc7 && v <= 0xc9) ||
                 (v >= 0xd4 && v <= 0xd8) || v == 0xc3 || (v >= 0x90 && v <= 0x9f) || v == 0xdc || v == 0xdd;
    return value ? CKPT__PROBE_NAME : CKPT__PROBE_NO;
}

static ckpt_status msgpack_open(ckpt_catalog *c, ckpt__source *src, ckpt_error *err) {
    uint32_t file;
    ckpt_status st = ckpt__cat_add_source(c, src, &file, err);
    if (st) return st;
    mp m = {.src = src, .path = src->name, .arena = ckpt__cat_arena(c), .budget = ckpt__cat_budget(c), .err = err,
            .size = src->size};
    if (m.size >> 48) /* node offsets hold 48 bits */
        return fail(&m, CKPT_E_LIMIT, 0, "a msgpack file of %llu bytes (at most 256 TiB)", (unsigned long long)m.size);
    m.win = ckpt__malloc(WINDOW);
    if (!m.win) return ckpt__oom(err, src->name, NULL);
    st = parse(&m);
    if (st == CKPT_OK && m.pos != m.size)
        st = fail(&m, CKPT__D(TRAILING_BYTES), m.pos, "%llu bytes after the msgpack document",
                  (unsigned long long)(m.size - m.pos));
    free(m.win);
    walker w = {.m = &m, .c = c, .file = file};
    if (st == CKPT_OK) {
        w.pieces = ckpt__malloc(16 * sizeof *w.pieces);
        w.piece_cap = w.pieces ? 16 : 0;
        if (!w.pieces) st = ckpt__oom(err, src->name, NULL);
    }
    ckpt__value *tree = NULL;
    if (st == CKPT_OK) st = walk(&w, &m.nodes[0], &tree);
    if (st == CKPT_OK && w.name.failed) st = ckpt__oom(err, src->name, "the object tree");
    /* The nodes and scratch go; the tree stays, with the catalog. */
    free(m.nodes);
    ckpt__arena_free(&m.scratch);
    ckpt__budget_release(m.budget, m.charged);
    if (st == CKPT_OK) st = ckpt__cat_set_tree(c, tree, err);
    free(w.name.data);
    free(w.pieces);
    ckpt__cat_set_format(c, CKPT_FORMAT_FLAX_MSGPACK);
    return st;
}

const ckpt__format ckpt__format_flax_msgpack = {"flax-msgpack", CKPT_FORMAT_FLAX_MSGPACK, msgpack_probe, msgpack_open};

/* ---- writing ----------------------------------------------------------------------- */

typedef struct mp_tree mp_tree;
struct mp_tree {
    const char *key; /* arena, not NUL-terminated */
    size_t key_len;
    size_t tensor;   /* SIZE_MAX for a map */
    mp_tree **kids;
    size_t count, cap;
};

typedef struct mp_gap { /* bytes between tensors, written at finish */
    uint64_t at;
    size_t from, len; /* in the state's bytes */
} mp_gap;

typedef struct mp_out {
    mp_tree root;
    ckpt__buf bytes; /* every byte that is not tensor data, gap after gap */
    mp_gap *gaps;
    size_t gap_count, gap_cap;
    uint64_t at;     /* file size so far */
} mp_out;

static mp_tree *child(ckpt__arena *a, mp_tree *t, const char *key, size_t len, bool *made) {
    for (size_t i = 0; i < t->count; i++)
        if (t->kids[i]->key_len == len && !memcmp(t->kids[i]->key, key, len)) return *made = false, t->kids[i];
    if (t->count == t->cap) {
        size_t cap = t->cap ? t->cap * 2 : 4;
        mp_tree **k = ckpt__arena_alloc(a, cap * sizeof *k);
        if (!k) return NULL;
        if (t->count) memcpy(k, t->kids, t->count * sizeof *k);
        t->kids = k, t->cap = cap;
    }
    mp_tree *c = ckpt__arena_alloc(a, sizeof *c);
    if (!c) return NULL;
    *c = (mp_tree){.key = key, .key_len = len, .tensor = SIZE_MAX};
    t->kids[t->count++] = c;
    *made = true;
    return c;
}

static ckpt_status mp_plan(ckpt__output *o, ckpt_error *err) {
    const ckpt_writer_options *opt = ckpt__out_options(o);
    const char *path = ckpt__out_path(o);
    if (opt->checksums)
        return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, path, NULL, -1,
                          "a Flax msgpack file has no metadata to record checksums in");
    ckpt__arena *a = ckpt__out_arena(o);
    mp_out *s = ckpt__arena_alloc(a, sizeof *s);
    if (!s) return ckpt__oom(err, path, NULL);
    memset(s, 0, sizeof *s);
    s->root.tensor = SIZE_MAX;
    *ckpt__out_format_state(o) = s;
    for (size_t i = 0; i < ckpt__out_count(o); i++) {
        ckpt__out_tensor *t = ckpt__out_tensor_at(o, i);
        if (t->file == CKPT__OUT_NONE) continue;
        t->file = 0;
        if (t->nbytes > 0xFFFFFFFFu)
            return ckpt__fail(err, CKPT_E_LIMIT, path, t->name, -1,
                              "%llu bytes: msgpack holds at most 4 GiB in one value (Flax would write the tensor in "
                              "chunks, whose bytes are not contiguous); write safetensors instead",
                              (unsigned long long)t->nbytes);
        mp_tree *at = &s->root;
        for (const char *p = t->name;;) {
            const char *dot = strchr(p, '.');
            size_t len = dot ? (size_t)(dot - p) : strlen(p);
            bool made;
            if (at->tensor != SIZE_MAX)
                return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, path, t->name, -1,
                                  "nests under the tensor '%s': names split at dots make a tensor and a map of it",
                                  ckpt__out_tensor_at(o, at->tensor)->name);
            if (!(at = child(a, at, p, len, &made))) return ckpt__oom(err, path, NULL);
            if (!dot) {
                if (!made)
                    return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, path, t->name, -1,
                                      "is both a tensor and a map of tensors once names are split at dots");
                at->tensor = i;
                break;
            }
            p = dot + 1;
        }
    }
    const char *base = ckpt__path_basename(path);
    return ckpt__out_set_files(o, 1, &base, err);
}

/* msgpack-python's encodings, the shortest that holds v: the `fixed` tag
 * with v in its low bits below `fix_limit`, else the first of the tags for
 * a 1-, 2-, 4- or 8-byte v (0: that width has none) whose width holds it,
 * the last one whatever v is. */
static void put_head(ckpt__buf *b, unsigned fixed, uint64_t fix_limit, const unsigned char tags[4], uint64_t v) {
    unsigned k = 0; /* past the tags that do not hold v, unless the last */
    while (v >= fix_limit && (!tags[k] || (k < 3 && tags[k + 1] && v >> (8u << k)))) k++;
    if (v < fix_limit) ckpt__put_be(b, fixed | v, 1);
    else ckpt__put_be(b, tags[k], 1), ckpt__put_be(b, v, 1u << k);
}
static void put_uint(ckpt__buf *b, uint64_t v) { put_head(b, 0, 128, (const unsigned char[]){0xcc, 0xcd, 0xce, 0xcf}, v); }
static void put_str(ckpt__buf *b, const char *s, size_t n) {
    put_head(b, 0xa0, 32, (const unsigned char[]){0xd9, 0xda, 0xdb, 0}, n);
    ckpt__buf_append(b, s, n);
}
static void put_map(ckpt__buf *b, size_t n) { put_head(b, 0x80, 16, (const unsigned char[]){0, 0xde, 0xdf, 0}, n); }
static void put_array(ckpt__buf *b, size_t n) { put_head(b, 0x90, 16, (const unsigned char[]){0, 0xdc, 0xdd, 0}, n); }
static void put_bin_header(ckpt__buf *b, uint64_t n) { put_head(b, 0, 0, (const unsigned char[]){0xc4, 0xc5, 0xc6, 0}, n); }

/* The bytes since the last gap (or tensor) become a gap ending at s->at. */
static bool close_gap(mp_out *s, size_t from) {
    mp_gap *g = ckpt__grow(s->gaps, s->gap_count, &s->gap_cap, sizeof *g, 64);
    if (!g) return false;
    s->gaps = g;
    s->gaps[s->gap_count++] = (mp_gap){s->at - (s->bytes.len - from), from, s->bytes.len - from};
    return true;
}

/* A tensor's ndarray extension, up to its data (which follows it). */
static ckpt_status emit_tensor(ckpt__output *o, mp_out *s, size_t tensor, size_t *from, ckpt_error *err) {
    ckpt__buf *b = &s->bytes;
    ckpt__out_tensor *x = ckpt__out_tensor_at(o, tensor);
    const char *dtype = ckpt__numpy_name(x->dtype);
    ckpt__buf payload = {0}; /* (shape, dtype.name, data) up to the data */
    put_array(&payload, 3);
    put_array(&payload, x->ndim);
    for (uint32_t d = 0; d < x->ndim; d++) put_uint(&payload, x->shape[d]);
    put_str(&payload, dtype, strlen(dtype));
    put_bin_header(&payload, x->nbytes);
    uint64_t len = payload.len + x->nbytes;
    size_t before = b->len;
    if (len == 1 || len == 2 || len == 4 || len == 8 || len == 16)
        ckpt__put_be(b, 0xd4 + (unsigned)__builtin_ctzll(len), 1);
    else if (len < 256) ckpt__put_be(b, 0xc7, 1), ckpt__put_be(b, len, 1);
    else if (len < 65536) ckpt__put_be(b, 0xc8, 1), ckpt__put_be(b, len, 2);
    else ckpt__put_be(b, 0xc9, 1), ckpt__put_be(b, len, 4);
    ckpt__put_be(b, EXT_NDARRAY, 1);
    ckpt__buf_append(b, payload.data, payload.len);
    bool failed = payload.failed;
    free(payload.data);
    if (failed || b->failed) return ckpt__oom(err, ckpt__out_path(o), NULL);
    s->at += b->len - before;
    if (!close_gap(s, *from)) return ckpt__oom(err, ckpt__out_path(o), NULL);
    *from = b->len;
    x->offset = s->at;
    s->at += x->nbytes;
    return CKPT_OK;
}

/* A map being written: its node and the next of its children. */
typedef struct open_map {
    const mp_tree *t;
    size_t next;
} open_map;

static ckpt_status begin_map(ckpt__output *o, mp_out *s, ckpt__stack *open, const mp_tree *t, ckpt_error *err) {
    size_t before = s->bytes.len;
    put_map(&s->bytes, t->count);
    s->at += s->bytes.len - before;
    open_map *m = ckpt__stack_push(open);
    if (!m) return ckpt__oom(err, ckpt__out_path(o), NULL);
    *m = (open_map){t, 0};
    return CKPT_OK;
}

/* The nested maps, depth first; the maps being written wait on a heap
 * stack (names split at dots nest as deep as they have dots). */
static ckpt_status emit(ckpt__output *o, mp_out *s, size_t *from, ckpt_error *err) {
    ckpt__buf *b = &s->bytes;
    ckpt__stack open = CKPT__STACK(open_map);
    ckpt_status st = begin_map(o, s, &open, &s->root, err);
    while (st == CKPT_OK && open.len) {
        open_map *m = ckpt__stack_top(&open);
        if (m->next == m->t->count) {
            ckpt__stack_pop(&open);
            continue;
        }
        const mp_tree *c = m->t->kids[m->next++];
        size_t before = b->len;
        put_str(b, c->key, c->key_len);
        s->at += b->len - before;
        st = c->tensor == SIZE_MAX ? begin_map(o, s, &open, c, err) : emit_tensor(o, s, c->tensor, from, err);
    }
    ckpt__stack_free(&open);
    if (st == CKPT_OK && b->failed) st = ckpt__oom(err, ckpt__out_path(o), NULL);
    return st;
}

static ckpt_status mp_layout(ckpt__output *o, uint32_t file, ckpt__buf *head, ckpt_error *err) {
    (void)file;
    mp_out *s = *ckpt__out_format_state(o);
    size_t from = 0;
    ckpt_status st = emit(o, s, &from, err);
    if (st == CKPT_OK && s->bytes.len > from && !close_gap(s, from)) st = ckpt__oom(err, ckpt__out_path(o), NULL);
    if (st == CKPT_OK && s->gap_count) /* the leading bytes: the first gap */
        ckpt__buf_append(head, s->bytes.data + s->gaps[0].from, s->gaps[0].len);
    if (st == CKPT_OK && head->failed) st = ckpt__oom(err, ckpt__out_path(o), NULL);
    if (st == CKPT_OK) ckpt__out_set_file_size(o, 0, s->at);
    if (st) { /* finish will not run */
        free(s->bytes.data), free(s->gaps);
        s->bytes.data = NULL, s->gaps = NULL;
    }
    return st;
}

static ckpt_status mp_finish(ckpt__output *o, ckpt_error *err) {
    mp_out *s = *ckpt__out_format_state(o);
    ckpt_status st = CKPT_OK;
    for (size_t g = 1; st == CKPT_OK && g < s->gap_count; g++)
        st = ckpt__out_patch(o, 0, s->gaps[g].at, s->bytes.data + s->gaps[g].from, s->gaps[g].len, err);
    free(s->bytes.data);
    free(s->gaps);
    s->bytes.data = NULL, s->gaps = NULL;
    return st;
}

static const char *const mp_suffixes[] = {".msgpack", NULL};

const ckpt__output_format ckpt__output_flax_msgpack = {
    .name = "flax-msgpack",
    .id = CKPT_FORMAT_FLAX_MSGPACK,
    .suffixes = mp_suffixes,
    .layouts = CKPT__LAYOUT_FILE,
    .plan = mp_plan,
    .layout = mp_layout,
    .finish = mp_finish,
    .owns = ckpt__out_owns_none,
    .dedup = false, /* to_bytes writes every leaf, tied ones too */
    .accepts = ckpt__numpy_accepts,
};
