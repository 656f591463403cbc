/* npy.c — NumPy .npy files (see numpy.h): the header parser shared with
 * .npz members, the dtype names shared with Flax msgpack, and the format,
 * read and written (one array, as np.save writes it). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../base/cursor.h"
#include "../io/file.h"
#include "format.h"
#include "numpy.h"
#include "output.h"

/* ---- dtype names ---------------------------------------------------------- */

typedef struct np_name {
    const char *name;
    ckpt_dtype dtype;
} np_name;

/* dtype.name as NumPy and ml_dtypes spell it (Flax writes these; np.load
 * accepts them as descr). */
static const np_name names[] = {
    {"bool", CKPT_BOOL},          {"uint8", CKPT_U8},
    {"int8", CKPT_I8},            {"int16", CKPT_I16},
    {"uint16", CKPT_U16},         {"float16", CKPT_F16},
    {"bfloat16", CKPT_BF16},      {"int32", CKPT_I32},
    {"uint32", CKPT_U32},         {"float32", CKPT_F32},
    {"complex64", CKPT_C64},      {"float64", CKPT_F64},
    {"int64", CKPT_I64},          {"uint64", CKPT_U64},
    {"float8_e5m2", CKPT_F8_E5M2}, {"float8_e4m3fn", CKPT_F8_E4M3},
    {"float8_e8m0fnu", CKPT_F8_E8M0}, {"float8_e4m3fnuz", CKPT_F8_E4M3FNUZ},
    {"float8_e5m2fnuz", CKPT_F8_E5M2FNUZ},
};

/* NumPy types ckpt has no dtype for, with the reason. */
static const struct {
    const char *prefix;
    const char *why;
} refused[] = {
    {"complex128", "complex128 has no safetensors dtype"},
    {"float128", "extended-precision floats have no safetensors dtype"},
    {"longdouble", "extended-precision floats have no safetensors dtype"},
    {"clongdouble", "extended-precision complex numbers have no safetensors dtype"},
    {"int4", "ml_dtypes' 4-bit integers have no safetensors dtype"},
    {"uint4", "ml_dtypes' 4-bit integers have no safetensors dtype"},
    {"int2", "ml_dtypes' 2-bit integers have no safetensors dtype"},
    {"uint2", "ml_dtypes' 2-bit integers have no safetensors dtype"},
    {"float4_e2m1fn", "ml_dtypes' float4_e2m1fn (one value per byte) has no safetensors dtype (F4 packs two)"},
    {"float6_", "ml_dtypes' float6 types (one value per byte) have no safetensors dtype (F6 is packed)"},
    {"float8_", "this float8 variant has no safetensors dtype"},
    {"object", "object arrays are pickles, which ckpt never runs"},
    {"str", "string arrays are not tensors"},
    {"bytes", "byte-string arrays are not tensors"},
    {"void", "raw void arrays are not tensors"},
    {"datetime64", "datetime arrays are not tensors"},
    {"timedelta64", "timedelta arrays are not tensors"},
};

const char *ckpt__numpy_name(ckpt_dtype dtype) {
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (names[i].dtype == dtype) return names[i].name;
    return NULL;
}

ckpt_status ckpt__numpy_accepts(const char *path, const char *name, ckpt_dtype dtype, uint32_t ndim,
                                const uint64_t *shape, ckpt_error *err) {
    (void)ndim, (void)shape;
    if (ckpt__numpy_name(dtype)) return CKPT_OK;
    return ckpt__fail(err, CKPT__D(UNSUPPORTED_DTYPE), path, name, -1,
                      "NumPy has no %s dtype: cast it to a float dtype first (--dtype, dtype=)", ckpt_dtype_name(dtype));
}

/* kind letter + size in bytes ('f', 4) → dtype */
static ckpt_dtype from_code(char kind, unsigned size, const char **why) {
    switch (kind) {
    case 'b': if (size == 1) return CKPT_BOOL; break;
    case 'i':
        switch (size) { case 1: return CKPT_I8; case 2: return CKPT_I16; case 4: return CKPT_I32; case 8: return CKPT_I64; }
        break;
    case 'u':
        switch (size) { case 1: return CKPT_U8; case 2: return CKPT_U16; case 4: return CKPT_U32; case 8: return CKPT_U64; }
        break;
    case 'f':
        switch (size) {
        case 1: return CKPT_F8_E5M2; /* ml_dtypes.float8_e5m2's dtype.str, as np.save writes it */
        case 2: return CKPT_F16;
        case 4: return CKPT_F32;
        case 8: return CKPT_F64;
        }
        if (why) *why = "extended-precision floats have no safetensors dtype";
        return CKPT_DTYPE_INVALID;
    case 'c':
        if (size == 8) return CKPT_C64;
        if (why) *why = size == 16 ? "complex128 has no safetensors dtype" : "this complex type has no safetensors dtype";
        return CKPT_DTYPE_INVALID;
    case 'V':
        /* np.save writes ml_dtypes.bfloat16 as '<V2'; it is the only
         * two-byte type NumPy stores as raw bytes. */
        if (size == 2) return CKPT_BF16;
        if (why)
            *why = size == 1 ? "a one-byte raw type: np.save writes every 8-bit ml_dtypes type (float8 variants, int4) "
                               "this way, so which one it was is lost; save it with its dtype name as descr, or as "
                               "safetensors"
                             : "raw void (structured or opaque) arrays are not tensors";
        return CKPT_DTYPE_INVALID;
    case 'O': if (why) *why = "object arrays are pickles, which ckpt never runs"; return CKPT_DTYPE_INVALID;
    case 'U': case 'S': case 'a': if (why) *why = "string arrays are not tensors"; return CKPT_DTYPE_INVALID;
    case 'M': case 'm': if (why) *why = "datetime and timedelta arrays are not tensors"; return CKPT_DTYPE_INVALID;
    }
    if (why) *why = "not a NumPy type ckpt knows";
    return CKPT_DTYPE_INVALID;
}

ckpt_dtype ckpt__numpy_dtype(const char *descr, bool *big_endian, const char **why) {
    *big_endian = false;
    if (why) *why = "not a NumPy type ckpt knows";
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (!strcmp(descr, names[i].name)) return names[i].dtype;
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++)
        if (!strncmp(descr, refused[i].prefix, strlen(refused[i].prefix))) {
            if (why) *why = refused[i].why;
            return CKPT_DTYPE_INVALID;
        }
    const char *s = descr;
    char order = '=';
    if (*s == '<' || *s == '>' || *s == '|' || *s == '=') order = *s++;
    if (!*s) return CKPT_DTYPE_INVALID;
    char kind = *s++;
    if (kind == 'O' && !*s) return from_code('O', 0, why);
    unsigned size = 0;
    if (*s < '0' || *s > '9') {
        /* '<M8[ns]' and friends have a suffix; anything else is unknown. */
        return kind == 'M' || kind == 'm' ? from_code(kind, 0, why) : CKPT_DTYPE_INVALID;
    }
    while (*s >= '0' && *s <= '9' && size < 100000) size = size * 10 + (unsigned)(*s++ - '0');
    if (*s && !((kind == 'M' || kind == 'm') && *s == '[')) return CKPT_DTYPE_INVALID;
    ckpt_dtype d = from_code(kind, size, why);
    if (d != CKPT_DTYPE_INVALID) *big_endian = order == '>' && size > 1;
    return d;
}

/* The descr ckpt writes for a dtype: NumPy's own dtype.str for NumPy's
 * types ('<f4', '|b1'), ml_dtypes' names for the others ('bfloat16',
 * 'float8_e4m3fn': np.load reads them back as such once ml_dtypes is
 * imported, where np.save's '<V2' comes back as raw bytes); NULL for F4
 * and F6 (packed, which NumPy cannot hold). */
static const char *numpy_descr(ckpt_dtype dtype) {
    switch (dtype) {
    case CKPT_BOOL: return "|b1";
    case CKPT_U8: return "|u1";
    case CKPT_I8: return "|i1";
    case CKPT_I16: return "<i2";
    case CKPT_U16: return "<u2";
    case CKPT_F16: return "<f2";
    case CKPT_I32: return "<i4";
    case CKPT_U32: return "<u4";
    case CKPT_F32: return "<f4";
    case CKPT_C64: return "<c8";
    case CKPT_F64: return "<f8";
    case CKPT_I64: return "<i8";
    case CKPT_U64: return "<u8";
    case CKPT_F4: case CKPT_F6_E2M3: case CKPT_F6_E3M2: case CKPT_DTYPE_INVALID: return NULL;
    default: return ckpt__numpy_name(dtype); /* bfloat16, float8_*: ml_dtypes' names */
    }
}

ckpt_status ckpt__npy_header_write(ckpt__buf *out, ckpt_dtype dtype, uint32_t ndim, const uint64_t *shape) {
    const char *descr = numpy_descr(dtype);
    if (!descr) return CKPT__D(UNKNOWN_DTYPE);
    ckpt__buf h = {0};
    char num[32];
    ckpt__buf_puts(&h, "{'descr': '");
    ckpt__buf_puts(&h, descr);
    ckpt__buf_puts(&h, "', 'fortran_order': False, 'shape': (");
    for (uint32_t d = 0; d < ndim; d++) {
        snprintf(num, sizeof num, d ? ", %llu" : "%llu", (unsigned long long)shape[d]);
        ckpt__buf_puts(&h, num);
    }
    ckpt__buf_puts(&h, ndim == 1 ? ",), }" : "), }");
    if (ndim) { /* numpy leaves room for the first axis to grow to 21 digits */
        snprintf(num, sizeof num, "%llu", (unsigned long long)shape[0]);
        for (size_t k = strlen(num); k < 21; k++) ckpt__buf_append(&h, " ", 1);
    }
    if (h.failed) {
        free(h.data);
        return CKPT_E_NO_MEMORY;
    }
    size_t hlen = h.len + 1, pre = 10, pad = 64 - (10 + hlen) % 64;
    if (hlen + pad > 65535) pre = 12, pad = 64 - (12 + hlen) % 64; /* version 2.0: a u32 length */
    uint64_t len = hlen + pad;
    unsigned char p[12] = {0x93, 'N', 'U', 'M', 'P', 'Y', pre == 10 ? 1 : 2, 0};
    ckpt__store_le(p + 8, len, (unsigned)(pre - 8));
    ckpt__buf_append(out, (const char *)p, pre);
    ckpt__buf_append(out, h.data, h.len);
    for (size_t k = 0; k < pad; k++) ckpt__buf_append(out, " ", 1);
    ckpt__buf_append(out, "\n", 1);
    free(h.data);
    return out->failed ? CKPT_E_NO_MEMORY : CKPT_OK;
}

/* ---- the header ------------------------------------------------------------- */

/* True when `head` starts with the .npy magic. */
static bool npy_sniff(const unsigned char *head, size_t n) {
    return n >= CKPT__NPY_MAGIC_LEN && !memcmp(head, CKPT__NPY_MAGIC, CKPT__NPY_MAGIC_LEN);
}

static ckpt_status bad(ckpt_error *err, const char *path, const char *tensor, int64_t base, uint64_t at,
                       const char *fmt, ...) CKPT__PRINTF(6, 7);
static ckpt_status bad(ckpt_error *err, const char *path, const char *tensor, int64_t base, uint64_t at,
                       const char *fmt, ...) {
    char detail[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(detail, sizeof detail, fmt, ap);
    va_end(ap);
    return ckpt__fail(err, CKPT__D(NPY_INVALID), path, tensor, base >= 0 ? base + (int64_t)at : -1, "%s", detail);
}

ckpt_status ckpt__npy_preamble(const unsigned char *head, size_t n, const char *path, const char *tensor,
                               int64_t base, uint64_t *data_offset, ckpt_error *err) {
    if (!npy_sniff(head, n))
        return bad(err, path, tensor, base, 0, "%s", "not a NumPy .npy array (no \\x93NUMPY magic)");
    ckpt__rd r = ckpt__rd_over(head, n, 0);
    ckpt__rd_skip(&r, CKPT__NPY_MAGIC_LEN);
    unsigned major = ckpt__rd_u8(&r), minor = ckpt__rd_u8(&r);
    uint64_t len = ckpt__rd_le(&r, major == 1 ? 2 : 4); /* the header's length */
    /* a version is judged once its preamble is there (a minor once its length is) */
    if (n >= CKPT__NPY_PREAMBLE && (major < 1 || major > 3 || (!r.bad && minor != 0))) {
        char v[32];
        snprintf(v, sizeof v, "%u.%u", major, minor);
        return bad(err, path, tensor, base, 6, ".npy format version %s is not 1.0, 2.0 or 3.0", v);
    }
    if (r.bad)
        return ckpt__fail(err, CKPT_E_TRUNCATED, path, tensor, base >= 0 ? base + (int64_t)n : -1,
                          ".npy ends inside its preamble");
    if (len > CKPT__NPY_MAX_HEADER)
        return ckpt__fail(err, CKPT_E_LIMIT, path, tensor, base >= 0 ? base + 8 : -1,
                          ".npy header of %llu bytes is over ckpt's limit of %u", (unsigned long long)len,
                          CKPT__NPY_MAX_HEADER);
    *data_offset = r.at + len;
    return CKPT_OK;
}

typedef struct lit {
    const unsigned char *s;
    size_t pos, end;
} lit;

static void skip_ws(lit *l) {
    while (l->pos < l->end && (l->s[l->pos] == ' ' || l->s[l->pos] == '\t' || l->s[l->pos] == '\n' ||
                               l->s[l->pos] == '\r'))
        l->pos++;
}

static bool take(lit *l, char c) {
    skip_ws(l);
    if (l->pos < l->end && l->s[l->pos] == c) {
        l->pos++;
        return true;
    }
    return false;
}

/* A quoted string without escapes, copied into out (cap bytes). */
static bool string(lit *l, char *out, size_t cap) {
    skip_ws(l);
    if (l->pos >= l->end || (l->s[l->pos] != '\'' && l->s[l->pos] != '"')) return false;
    unsigned char q = l->s[l->pos++];
    size_t n = 0;
    while (l->pos < l->end && l->s[l->pos] != q) {
        unsigned char c = l->s[l->pos++];
        if (c == '\\' || c < 0x20 || n + 1 >= cap) return false;
        out[n++] = (char)c;
    }
    if (l->pos >= l->end) return false;
    l->pos++;
    out[n] = '\0';
    return true;
}

static bool word(lit *l, const char *w) {
    skip_ws(l);
    size_t n = strlen(w);
    if (l->end - l->pos < n || memcmp(l->s + l->pos, w, n)) return false;
    size_t after = l->pos + n;
    if (after < l->end) {
        unsigned char c = l->s[after];
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_') return false;
    }
    l->pos = after;
    return true;
}

/* A non-negative integer (Python 2's trailing L allowed, as NumPy does). */
static bool integer(lit *l, uint64_t *v) {
    skip_ws(l);
    size_t start = l->pos;
    uint64_t x = 0;
    while (l->pos < l->end && l->s[l->pos] >= '0' && l->s[l->pos] <= '9') {
        if (!ckpt__mul_u64(x, 10, &x) || !ckpt__add_u64(x, (uint64_t)(l->s[l->pos] - '0'), &x)) return false;
        l->pos++;
    }
    if (l->pos == start) return false;
    if (l->pos < l->end && (l->s[l->pos] == 'L' || l->s[l->pos] == 'l')) l->pos++;
    *v = x;
    return true;
}

ckpt_status ckpt__npy_parse(const unsigned char *buf, size_t n, const char *path, const char *tensor, int64_t base,
                            ckpt__arena *arena, ckpt__npy_header *out, ckpt_error *err) {
    memset(out, 0, sizeof *out);
    uint64_t data_offset;
    ckpt_status st = ckpt__npy_preamble(buf, n, path, tensor, base, &data_offset, err);
    if (st) return st;
    if (data_offset > n)
        return ckpt__fail(err, CKPT_E_TRUNCATED, path, tensor, base >= 0 ? base + (int64_t)n : -1,
                          ".npy ends inside its %llu-byte header", (unsigned long long)data_offset);
    size_t start = buf[6] == 1 ? 10 : 12;
    if (buf[6] != 3) /* 1.0 and 2.0 headers are latin-1; NumPy writes ASCII */
        for (size_t i = start; i < data_offset; i++)
            if (buf[i] >= 0x80) return bad(err, path, tensor, base, i, "%s", ".npy header is not ASCII");
    if (buf[6] == 3 && ckpt__utf8_check(buf + start, data_offset - start) != data_offset - start)
        return bad(err, path, tensor, base, start + ckpt__utf8_check(buf + start, data_offset - start), "%s",
                   ".npy header is not UTF-8");
    lit l = {buf, start, (size_t)data_offset};
    char key[32], descr[64];
    bool have_descr = false, have_order = false, have_shape = false;
    uint64_t shape[CKPT_MAX_DIMS];
    uint32_t ndim = 0;
    if (!take(&l, '{')) return bad(err, path, tensor, base, l.pos, "%s", ".npy header is not a dict literal");
    for (;;) {
        if (take(&l, '}')) break;
        size_t key_at = (skip_ws(&l), l.pos);
        if (!string(&l, key, sizeof key) || !take(&l, ':'))
            return bad(err, path, tensor, base, key_at, "%s", ".npy header: expected a quoted key and ':'");
        size_t at = (skip_ws(&l), l.pos);
        if (!strcmp(key, "descr")) {
            if (have_descr) return bad(err, path, tensor, base, key_at, "%s", ".npy header: 'descr' given twice");
            if (l.pos < l.end && l.s[l.pos] == '[')
                return ckpt__fail(err, CKPT__D(UNKNOWN_DTYPE), path, tensor, base >= 0 ? base + (int64_t)at : -1,
                                  ".npy holds a structured array (descr is a list of fields), not a tensor");
            if (!string(&l, descr, sizeof descr))
                return bad(err, path, tensor, base, at, "%s", ".npy header: 'descr' is not a dtype string");
            have_descr = true;
        } else if (!strcmp(key, "fortran_order")) {
            if (have_order) return bad(err, path, tensor, base, key_at, "%s", ".npy header: 'fortran_order' given twice");
            if (word(&l, "True")) out->fortran = true;
            else if (word(&l, "False")) out->fortran = false;
            else return bad(err, path, tensor, base, at, "%s", ".npy header: 'fortran_order' is not True or False");
            have_order = true;
        } else if (!strcmp(key, "shape")) {
            if (have_shape) return bad(err, path, tensor, base, key_at, "%s", ".npy header: 'shape' given twice");
            if (!take(&l, '(')) return bad(err, path, tensor, base, at, "%s", ".npy header: 'shape' is not a tuple");
            bool comma = true;
            while (!take(&l, ')')) {
                size_t dim_at = (skip_ws(&l), l.pos);
                if (!comma) return bad(err, path, tensor, base, dim_at, "%s", ".npy header: 'shape' is malformed");
                if (ndim == CKPT_MAX_DIMS)
                    return ckpt__fail(err, CKPT_E_LIMIT, path, tensor, base >= 0 ? base + (int64_t)dim_at : -1,
                                      ".npy shape has more than %d dimensions", CKPT_MAX_DIMS);
                if (!integer(&l, &shape[ndim]))
                    return bad(err, path, tensor, base, dim_at, "%s",
                               ".npy header: 'shape' holds something other than non-negative integers");
                ndim++;
                comma = take(&l, ',');
            }
            /* (3) is an int in Python, not a tuple: NumPy writes (3,). */
            if (ndim == 1 && !comma)
                return bad(err, path, tensor, base, at, "%s", ".npy header: 'shape' is not a tuple (write (n,))");
            have_shape = true;
        } else {
            return bad(err, path, tensor, base, key_at, ".npy header has the unexpected key '%s'", key);
        }
        if (!take(&l, ',')) {
            if (take(&l, '}')) break;
            return bad(err, path, tensor, base, l.pos, "%s", ".npy header: expected ',' or '}'");
        }
    }
    skip_ws(&l);
    if (l.pos != l.end) return bad(err, path, tensor, base, l.pos, "%s", ".npy header: text after the dict");
    if (!have_descr || !have_order || !have_shape)
        return bad(err, path, tensor, base, start, ".npy header lacks '%s'",
                   !have_descr ? "descr" : !have_order ? "fortran_order" : "shape");
    const char *why;
    out->dtype = ckpt__numpy_dtype(descr, &out->big_endian, &why);
    if (out->dtype == CKPT_DTYPE_INVALID)
        return ckpt__fail(err, CKPT__D(UNKNOWN_DTYPE), path, tensor, base >= 0 ? base + (int64_t)start : -1,
                          ".npy dtype '%s': %s", descr, why);
    if (ckpt__tensor_size(out->dtype, ndim, shape, &out->numel, &out->nbytes))
        return ckpt__fail(err, CKPT__D(SHAPE_OVERFLOW), path, tensor, base >= 0 ? base + (int64_t)start : -1,
                          ".npy shape's byte count overflows");
    out->ndim = ndim;
    out->shape = ckpt__arena_alloc(arena, (ndim ? ndim : 1) * sizeof *out->shape);
    if (!out->shape) return ckpt__oom(err, path, tensor);
    memcpy(out->shape, shape, ndim * sizeof *shape);
    out->data_offset = data_offset;
    return CKPT_OK;
}

bool ckpt__npy_fortran_strides(uint32_t ndim, const uint64_t *shape, int64_t *strides) {
    uint32_t longer = 0;
    uint64_t s = 1;
    for (uint32_t d = 0; d < ndim; d++) {
        if (shape[d] == 0) return false;
        longer += shape[d] > 1;
    }
    if (longer <= 1) return false;
    for (uint32_t d = 0; d < ndim; d++) {
        strides[d] = (int64_t)s;
        s *= shape[d];
    }
    return true;
}

/* ---- the format: one .npy file ------------------------------------------------ */

static int npy_probe(const unsigned char *head, size_t n, const char *name) {
    (void)name;
    return npy_sniff(head, n) ? CKPT__PROBE_MAGIC : CKPT__PROBE_NO;
}

/* The tensor of a .npy is named after the file: "weights.npy" → "weights". */
static char *stem(ckpt__arena *arena, const char *path) {
    const char *base = ckpt__path_basename(path);
    size_t n = strlen(base);
    if (n > 4 && !strcmp(base + n - 4, ".npy")) n -= 4;
    return ckpt__arena_strndup(arena, base, n);
}

static ckpt_status npy_open(ckpt_catalog *c, ckpt__source *src, ckpt_error *err) {
    uint32_t file;
    ckpt_status st = ckpt__cat_add_source(c, src, &file, err);
    if (st) return st;
    ckpt__arena *arena = ckpt__cat_arena(c);
    const char *path = src->name;
    char *name = stem(arena, path);
    if (!name) return ckpt__oom(err, path, NULL);
    unsigned char head[12] = {0};
    size_t n = src->size < sizeof head ? (size_t)src->size : sizeof head;
    if ((st = ckpt__source_read(src, head, n, 0, err))) return st;
    uint64_t data_offset;
    if ((st = ckpt__npy_preamble(head, n, path, name, 0, &data_offset, err))) return st;
    if (data_offset > src->size)
        return ckpt__fail(err, CKPT_E_TRUNCATED, path, name, (int64_t)src->size, ".npy ends inside its %llu-byte header",
                          (unsigned long long)data_offset);
    unsigned char *buf = ckpt__malloc((size_t)data_offset);
    if (!buf) return ckpt__oom(err, path, name);
    ckpt__npy_header h;
    st = ckpt__source_read(src, buf, data_offset, 0, err);
    if (st == CKPT_OK) st = ckpt__npy_parse(buf, (size_t)data_offset, path, name, 0, arena, &h, err);
    free(buf);
    if (st) return st;
    if (h.nbytes > src->size - h.data_offset)
        return ckpt__fail(err, CKPT_E_TRUNCATED, path, name, (int64_t)src->size,
                          ".npy data of %llu bytes from offset %llu runs past the end of the file",
                          (unsigned long long)h.nbytes, (unsigned long long)h.data_offset);
    ckpt__piece piece = {.file = file, .offset = h.data_offset, .big_endian = h.big_endian};
    int64_t strides[CKPT_MAX_DIMS];
    if (h.fortran && ckpt__npy_fortran_strides(h.ndim, h.shape, strides)) {
        int64_t *s = ckpt__arena_alloc(arena, h.ndim * sizeof *s);
        if (!s) return ckpt__oom(err, path, name);
        memcpy(s, strides, h.ndim * sizeof *s);
        piece.strides = s;
    }
    ckpt__tensor_decl d = {name, h.dtype, h.ndim, h.shape, CKPT__OWN_STORAGE, &piece, 1};
    if ((st = ckpt__cat_add_tensor(c, &d, err))) return st;
    ckpt__cat_set_format(c, CKPT_FORMAT_NPY);
    return CKPT_OK;
}

const ckpt__format ckpt__format_npy = {"npy", CKPT_FORMAT_NPY, npy_probe, npy_open};

/* ---- the output format: one array, as np.save writes it --------------------- */

static ckpt_status npy_plan(ckpt__output *o, ckpt_error *err) {
    const char *path = ckpt__out_path(o);
    size_t n = ckpt__out_count(o);
    if (ckpt__out_options(o)->checksums)
        return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, path, NULL, -1,
                          "an .npy file has no metadata to record checksums in");
    if (n != 1)
        return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, path, NULL, -1,
                          "an .npy file holds one array, and the checkpoint has %zu tensors%s%s%s%s%s: write an .npz "
                          "archive (an array per tensor), or select one tensor",
                          n, n ? " (" : "", n ? ckpt__out_tensor_at(o, 0)->name : "", n ? ", " : "",
                          n ? ckpt__out_tensor_at(o, 1)->name : "", n > 2 ? ", …)" : n ? ")" : "");
    ckpt__out_tensor_at(o, 0)->file = 0;
    const char *base = ckpt__path_basename(path);
    return ckpt__out_set_files(o, 1, &base, err);
}

static ckpt_status npy_layout(ckpt__output *o, uint32_t file, ckpt__buf *head, ckpt_error *err) {
    ckpt__out_tensor *t = ckpt__out_tensor_at(o, 0);
    if (ckpt__npy_header_write(head, t->dtype, t->ndim, t->shape) != CKPT_OK) /* dtypes were checked as declared */
        return ckpt__oom(err, ckpt__out_path(o), t->name);
    t->offset = head->len;
    ckpt__out_set_file_size(o, file, head->len + t->nbytes);
    return CKPT_OK;
}

static const char *const npy_suffixes[] = {".npy", NULL};

const ckpt__output_format ckpt__output_npy = {
    .name = "npy",
    .id = CKPT_FORMAT_NPY,
    .suffixes = npy_suffixes,
    .layouts = CKPT__LAYOUT_FILE,
    .plan = npy_plan,
    .layout = npy_layout,
    .owns = ckpt__out_owns_none,
    .dedup = false,
    .accepts = ckpt__numpy_accepts,
};
