/* gguf_write.c — GGUF output: key-values copied from a GGUF source's
 * encoding (ckpt__gguf_encoding: no text in between), or encoded from
 * typed values read from the typed JSON a caller's metadata holds; and the
 * header layout of gguf-py's GGUFWriter (see gguf.h). */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../base/cursor.h"
#include "../io/file.h"
#include "gguf.h"
#include "../base/json.h"
#include "../base/value.h"
#include "output.h"

enum { T_U8, T_I8, T_U16, T_I16, T_U32, T_I32, T_F32, T_BOOL, T_STRING, T_ARRAY, T_U64, T_I64, T_F64, T_COUNT };

static int type_from_name(const char *s) {
    for (uint32_t t = 0; t < T_COUNT; t++)
        if (strcmp(ckpt__gguf_type_name(t), s) == 0) return (int)t;
    return -1;
}

static void put(ckpt__buf *b, const void *p, size_t n) { ckpt__buf_append(b, p, n); }
static void put_str(ckpt__buf *b, const char *s, size_t n) {
    ckpt__put_le(b, n, 8);
    put(b, s, n);
}

typedef struct enc {
    char *why;
    size_t why_len;
} enc;

static bool fail(enc *e, const char *fmt, const char *arg) {
    snprintf(e->why, e->why_len, fmt, arg);
    return false;
}

/* Whether a number's text is an integer's (no fraction, no exponent). */
static bool is_integer_text(const char *s) { return !strpbrk(s, ".eE"); }

/* The digits of an integer (a number as JSON wrote it: read_object keeps
 * numbers as text), or NULL for any other value. */
static const char *integer_text(const ckpt__value *n) {
    return n->kind == CKPT__V_NUMBER && is_integer_text(n->u.s.data) ? n->u.s.data : NULL;
}

/* Encodes one value of a fixed-size or string type from a plain value. */
static bool encode_scalar(enc *e, ckpt__buf *out, uint32_t type, const ckpt__value *n) {
    if (type == T_STRING) {
        if (n->kind != CKPT__V_STR) return fail(e, "a %s value must be a JSON string", "string");
        put_str(out, n->u.s.data, n->u.s.len);
        return true;
    }
    if (type == T_BOOL) {
        if (n->kind != CKPT__V_BOOL) return fail(e, "a %s value must be true or false", "bool");
        unsigned char v = n->u.b;
        put(out, &v, 1);
        return true;
    }
    if (type == T_F32 || type == T_F64) {
        double d;
        if (n->kind == CKPT__V_STR && strcmp(n->u.s.data, "nan") == 0) d = NAN;
        else if (n->kind == CKPT__V_STR && strcmp(n->u.s.data, "inf") == 0) d = INFINITY;
        else if (n->kind == CKPT__V_STR && strcmp(n->u.s.data, "-inf") == 0) d = -INFINITY;
        else if (n->kind == CKPT__V_NUMBER) d = strtod(n->u.s.data, NULL);
        else return fail(e, "a %s value must be a number (or \"nan\", \"inf\", \"-inf\")", ckpt__gguf_type_name(type));
        if (type == T_F32) {
            float f = (float)d;
            put(out, &f, 4);
        } else {
            put(out, &d, 8);
        }
        return true;
    }
    const char *text = integer_text(n);
    if (!text) return fail(e, "a %s value must be an integer", ckpt__gguf_type_name(type));
    bool neg = text[0] == '-';
    errno = 0;
    char *end;
    long long sv = 0;
    unsigned long long uv = 0;
    if (neg) sv = strtoll(text, &end, 10);
    else uv = strtoull(text, &end, 10);
    if (errno) return fail(e, "integer %s out of range", text);
    static const struct { long long lo; unsigned long long hi; unsigned size; } range[T_COUNT] = {
        [T_U8] = {0, 255, 1}, [T_I8] = {-128, 127, 1}, [T_U16] = {0, 65535, 2}, [T_I16] = {-32768, 32767, 2},
        [T_U32] = {0, 4294967295ULL, 4}, [T_I32] = {-2147483648LL, 2147483647, 4},
        [T_U64] = {0, 18446744073709551615ULL, 8}, [T_I64] = {INT64_MIN, INT64_MAX, 8}};
    if (neg ? sv < range[type].lo : uv > range[type].hi)
        return fail(e, "integer %s does not fit the type", text);
    uint64_t bits = neg ? (uint64_t)sv : (uint64_t)uv;
    put(out, &bits, range[type].size); /* little-endian: the low bytes */
    return true;
}

/* The elements of an array being encoded: its list, the next one, their
 * type. */
typedef struct open_elements {
    const ckpt__value *list;
    uint32_t next;
    int et;
} open_elements;

/* The GGUF type named by member `key` of a typed object, or -1 (why set). */
static int member_type(enc *e, const ckpt__value *v, const char *key, const char *missing) {
    const ckpt__value *t = ckpt__value_member(v, key);
    if (!t || t->kind != CKPT__V_STR) return fail(e, "%s", missing), -1;
    int type = type_from_name(t->u.s.data);
    if (type < 0) fail(e, "unknown GGUF type \"%s\"", t->u.s.data);
    return type;
}

/* A typed object {"gguf_type": t, ["element": et,] "value": v}, `depth`
 * arrays deep: its type number (with_type), then a scalar's payload, or an
 * array's element type and count (its elements follow: *open receives
 * them). */
static bool encode_head(enc *e, ckpt__buf *out, const ckpt__value *typed, size_t depth, bool with_type,
                        open_elements *open) {
    open->list = NULL;
    if (typed->kind != CKPT__V_OBJECT) return fail(e, "%s", "an array of arrays holds typed objects");
    int type = member_type(e, typed, CKPT_GGUF_TYPE_KEY, "missing \"" CKPT_GGUF_TYPE_KEY "\"");
    if (type < 0) return false;
    const ckpt__value *v = ckpt__value_member(typed, "value");
    if (!v) return fail(e, "%s", "missing \"value\"");
    if (with_type) ckpt__put_le(out, (uint32_t)type, 4);
    if (type != T_ARRAY) return encode_scalar(e, out, (uint32_t)type, v);
    int et = member_type(e, typed, "element", "an array needs \"element\"");
    if (et < 0) return false;
    if (et == T_ARRAY && depth + 1 >= CKPT__GGUF_MAX_NESTING) return fail(e, "%s", "arrays nested too deep");
    if (v->kind != CKPT__V_LIST) return fail(e, "%s", "an array's \"value\" must be a JSON array");
    ckpt__put_le(out, (uint32_t)et, 4);
    ckpt__put_le(out, v->count, 8);
    *open = (open_elements){v, 0, et};
    return true;
}

/* A typed object: its type number, then its payload; arrays of arrays are
 * followed on a heap stack. */
static bool encode_typed(enc *e, ckpt__buf *out, const ckpt__value *typed) {
    ckpt__stack open = CKPT__STACK(open_elements);
    open_elements first;
    bool ok = encode_head(e, out, typed, 0, true, &first);
    open_elements *top = ok && first.list ? ckpt__stack_push(&open) : NULL;
    if (top) *top = first;
    else if (ok && first.list) ok = fail(e, "%s", "out of memory");
    while (ok && (top = ckpt__stack_top(&open))) {
        if (top->next == top->list->count) {
            ckpt__stack_pop(&open);
            continue;
        }
        const ckpt__value *item = top->list->u.items[top->next++];
        if (top->et != T_ARRAY) {
            ok = encode_scalar(e, out, (uint32_t)top->et, item);
            continue;
        }
        open_elements inner;
        if (!(ok = encode_head(e, out, item, open.len, false, &inner))) continue;
        if (!(top = ckpt__stack_push(&open))) ok = fail(e, "%s", "out of memory");
        else *top = inner;
    }
    ckpt__stack_free(&open);
    return ok;
}

/* A JSON object's text read into values (numbers as their text, which
 * the encoders convert to each GGUF type): metadata_json, {key: value},
 * or a metadata entry's typed value.  `why` says what else it is. */
static ckpt_status read_object(ckpt__arena *arena, const char *json_text, const ckpt__value **root, char *why,
                               size_t why_len) {
    size_t len = strlen(json_text), at;
    char *text = ckpt__arena_alloc(arena, len + 1); /* the values' strings stay in it */
    if (!text) return CKPT_E_NO_MEMORY;
    memcpy(text, json_text, len + 1);
    ckpt__json_doc doc;
    const char *reason;
    ckpt__value *v = NULL;
    ckpt_status st = ckpt__json_parse(text, len, &doc, &at, &reason);
    if (st) {
        snprintf(why, why_len, "not JSON at byte %zu: %s", at, reason);
        return st == CKPT_E_NO_MEMORY ? st : CKPT_E_INVALID_ARGUMENT;
    }
    st = ckpt__value_from_doc(arena, &doc, CKPT__VALUE_RAW, &v, NULL, NULL);
    ckpt__json_free(&doc);
    if (st) return CKPT_E_NO_MEMORY;
    if (v->kind != CKPT__V_OBJECT) {
        snprintf(why, why_len, "not a JSON object {key: value}");
        return CKPT_E_INVALID_ARGUMENT;
    }
    *root = v;
    return CKPT_OK;
}

/* A metadata value's text read as a typed object's value in `arena`, or
 * NULL when it is not one (then it is a plain string). */
static const ckpt__value *parse_typed(ckpt__arena *arena, const char *value) {
    const ckpt__value *v;
    char why[64];
    if (value[0] != '{' || !strstr(value, "\"" CKPT_GGUF_TYPE_KEY "\"")) return NULL;
    if (read_object(arena, value, &v, why, sizeof why) != CKPT_OK) return NULL;
    return ckpt__value_member(v, CKPT_GGUF_TYPE_KEY) ? v : NULL;
}

/* True when `value` is typed JSON ({"gguf_type": ...}); *type then receives
 * its type number and, for a u32, *u32 its value (general.alignment). */
static bool typed_value(const char *value, uint32_t *type, uint64_t *u32) {
    ckpt__arena arena = {0};
    const ckpt__value *typed = parse_typed(&arena, value);
    if (typed) {
        const ckpt__value *t = ckpt__value_member(typed, CKPT_GGUF_TYPE_KEY), *v = ckpt__value_member(typed, "value");
        int ty = t->kind == CKPT__V_STR ? type_from_name(t->u.s.data) : -1;
        *type = ty < 0 ? UINT32_MAX : (uint32_t)ty;
        const char *digits = ty == T_U32 && v ? integer_text(v) : NULL;
        if (u32) *u32 = digits && digits[0] != '-' ? strtoull(digits, NULL, 10) : 0;
    }
    ckpt__arena_free(&arena);
    return typed != NULL;
}

ckpt_status ckpt__gguf_encode_kv(ckpt__buf *out, const char *key, const char *value, char *why, size_t why_len) {
    put_str(out, key, strlen(key));
    ckpt__arena arena = {0};
    const ckpt__value *typed = parse_typed(&arena, value);
    enc e = {why, why_len};
    bool ok = true;
    if (typed) {
        ok = encode_typed(&e, out, typed);
    } else {
        ckpt__put_le(out, T_STRING, 4);
        put_str(out, value, strlen(value));
    }
    ckpt__arena_free(&arena);
    if (!ok) return CKPT__D(GGUF_KV_TYPE);
    return out->failed ? CKPT_E_NO_MEMORY : CKPT_OK;
}

/* ---- metadata_json values: typed as gguf-py types Python values ------------------- */

/* gguf-py's GGUFValueType.get_type for a plain value (numbers as their
 * text); NULL for null and for what is no plain JSON value. */
static const char *infer_type(const ckpt__value *n) {
    switch (n->kind) {
    case CKPT__V_STR: return "string";
    case CKPT__V_BOOL: return "bool";
    case CKPT__V_LIST: return "array";
    case CKPT__V_NUMBER: {
        if (!is_integer_text(n->u.s.data)) return "f32";
        errno = 0;
        long long v = strtoll(n->u.s.data, NULL, 10);
        if (errno) return n->u.s.data[0] == '-' ? "i64" : "u64";
        return v >= INT32_MIN && v <= INT32_MAX ? "i32" : "i64";
    }
    default: return NULL;
    }
}

/* A list being typed: the list, its next element, their type. */
typedef struct open_list {
    const ckpt__value *list;
    uint32_t next;
    const char *et;
} open_list;

/* A plain value `depth` lists deep, typed: {"gguf_type": ..., "value": ...}
 * whole; a list, up to its elements (*list receives them). */
static bool typed_head(const ckpt__value *n, size_t depth, ckpt__buf *b, char *why, size_t why_len, open_list *list) {
    list->list = NULL;
    const char *type = infer_type(n);
    if (n->kind == CKPT__V_OBJECT && ckpt__value_member(n, CKPT_GGUF_TYPE_KEY)) {
        ckpt__value_json(b, n);
        return true;
    }
    if (!type) {
        if (n->kind == CKPT__V_NULL) snprintf(why, why_len, "null has no GGUF type");
        else snprintf(why, why_len, "an object value must be typed ({\"%s\": ...})", CKPT_GGUF_TYPE_KEY);
        return false;
    }
    if (depth >= CKPT__GGUF_MAX_NESTING) {
        snprintf(why, why_len, "arrays nested too deep");
        return false;
    }
    ckpt__buf_puts(b, "{\"" CKPT_GGUF_TYPE_KEY "\": \"");
    ckpt__buf_puts(b, type);
    ckpt__buf_puts(b, "\", ");
    if (n->kind != CKPT__V_LIST) {
        ckpt__buf_puts(b, "\"value\": ");
        ckpt__value_json(b, n);
        ckpt__buf_puts(b, "}");
        return true;
    }
    if (n->count == 0) {
        snprintf(why, why_len, "an empty list has no element type (give a typed value)");
        return false;
    }
    const char *et = infer_type(n->u.items[0]);
    if (!et) {
        snprintf(why, why_len, "null has no GGUF type");
        return false;
    }
    ckpt__buf_puts(b, "\"element\": \"");
    ckpt__buf_puts(b, et);
    ckpt__buf_puts(b, "\", \"value\": [");
    *list = (open_list){n, 0, et};
    return true;
}

/* A plain value typed: {"gguf_type": ..., "value": ...}; lists of lists
 * are followed on a heap stack. */
static bool typed_from_plain(const ckpt__value *n, ckpt__buf *b, char *why, size_t why_len) {
    ckpt__stack open = CKPT__STACK(open_list);
    open_list first;
    bool ok = typed_head(n, 0, b, why, why_len, &first);
    open_list *top = ok && first.list ? ckpt__stack_push(&open) : NULL;
    if (top) *top = first;
    else if (ok && first.list) b->failed = true;
    while (ok && !b->failed && (top = ckpt__stack_top(&open))) {
        if (top->next == top->list->count) {
            ckpt__buf_puts(b, "]}");
            ckpt__stack_pop(&open);
            continue;
        }
        const ckpt__value *item = top->list->u.items[top->next];
        const char *et = top->et;
        if (top->next++) ckpt__buf_puts(b, ", ");
        const char *t = infer_type(item);
        if (!t || (strcmp(t, et) != 0 && !(strchr("iuf", t[0]) && strchr("iuf", et[0])))) {
            snprintf(why, why_len, "list elements of different types");
            ok = false;
            break;
        }
        if (strcmp(et, "array") != 0) {
            ckpt__value_json(b, item);
            continue;
        }
        open_list inner;
        if (!(ok = typed_head(item, open.len, b, why, why_len, &inner)) || !inner.list) continue;
        if (!(top = ckpt__stack_push(&open))) b->failed = true;
        else *top = inner;
    }
    ckpt__stack_free(&open);
    return ok;
}

ckpt_status ckpt__gguf_metadata_pairs(const char *json_text, char ***keys, char ***values, size_t *count, char *why,
                                      size_t why_len) {
    *keys = *values = NULL;
    *count = 0;
    ckpt__arena arena = {0};
    const ckpt__value *root = NULL;
    ckpt_status st = read_object(&arena, json_text, &root, why, why_len);
    size_t n = st ? 0 : root->count;
    char **k = st ? NULL : ckpt__calloc(n ? n : 1, sizeof *k), **v = st ? NULL : ckpt__calloc(n ? n : 1, sizeof *v);
    if (!st && (!k || !v)) st = CKPT_E_NO_MEMORY;
    for (size_t m = 0; st == CKPT_OK && m < n; m++) {
        const char *key = ckpt__value_key(root, m)->u.s.data;
        const ckpt__value *value = ckpt__value_at(root, m);
        ckpt__buf b = {0};
        if (value->kind == CKPT__V_STR) ckpt__buf_append(&b, value->u.s.data, value->u.s.len);
        else if (!typed_from_plain(value, &b, why, why_len)) st = CKPT__D(GGUF_KV_TYPE);
        if (st == CKPT_OK && !b.data) b.data = ckpt__strdup("");
        if (st == CKPT_OK && (b.failed || !b.data || !(k[m] = ckpt__strdup(key)))) st = CKPT_E_NO_MEMORY;
        if (st) {
            free(b.data);
            if (st == CKPT__D(GGUF_KV_TYPE)) {
                char tmp[256];
                snprintf(tmp, sizeof tmp, "%s", why);
                snprintf(why, why_len, "key '%s': %s", key, tmp);
            }
            break;
        }
        v[m] = b.data;
        *count = m + 1;
    }
    ckpt__arena_free(&arena);
    if (st) {
        for (size_t m = 0; k && v && m < n; m++) free(k[m]), free(v[m]);
        free(k);
        free(v);
        *count = 0;
        return st;
    }
    *keys = k, *values = v;
    return CKPT_OK;
}

/* ---- the header ----------------------------------------------------------------------- */

/* A pair whose value is encoded: GGUF's encoding copied after the key,
 * another format's written from its text. */
static ckpt_status encode_encoded(ckpt__buf *out, const char *key, const ckpt__encoded *e, char *why, size_t why_len) {
    if (e->format != ckpt__gguf_encoding) {
        char *text = e->json(e);
        ckpt_status st = text ? ckpt__gguf_encode_kv(out, key, text, why, why_len) : CKPT_E_NO_MEMORY;
        free(text);
        return st;
    }
    put_str(out, key, strlen(key));
    put(out, e->bytes, e->len);
    return out->failed ? CKPT_E_NO_MEMORY : CKPT_OK;
}

/*
 * Renders a GGUF file's header, as GGUFWriter writes it: the key-values in
 * the given order (the caller puts general.architecture first; pair i
 * copied from encoded[i] when encoded and encoded[i] are not NULL and it is
 * GGUF's encoding, else from the text values[i] (or encoded[i]'s text) as
 * ckpt__gguf_encode_kv takes it), the tensor infos in the given order, padding to `alignment`; fills each tensor's
 * absolute offset and *file_size (every tensor padded to the alignment).
 */
static ckpt_status render_header(const char *path, const char *const *keys, const char *const *values,
                                 const ckpt__encoded *const *encoded, size_t kv_count, ckpt__gguf_out_tensor *tensors,
                                 size_t count, uint32_t alignment, ckpt__buf *header, uint64_t *file_size,
                                 ckpt_error *err) {
    ckpt__buf *b = header;
    put(b, "GGUF", 4);
    CKPT__PUT_FIELDS(b, {4, 3}, {8, count}, {8, kv_count}); /* version 3 */
    for (size_t i = 0; i < kv_count; i++) {
        char why[256] = "";
        ckpt_status st = encoded && encoded[i] ? encode_encoded(b, keys[i], encoded[i], why, sizeof why)
                                               : ckpt__gguf_encode_kv(b, keys[i], values[i], why, sizeof why);
        if (st == CKPT_E_NO_MEMORY) return ckpt__oom(err, path, "the GGUF header");
        if (st) return ckpt__fail(err, st, NULL, NULL, -1, "metadata '%s': %s", keys[i], why);
    }
    uint64_t rel = 0;
    for (size_t i = 0; i < count; i++) {
        ckpt__gguf_out_tensor *t = &tensors[i];
        int ggml = ckpt_dtype_ggml_type(t->dtype);
        if (ggml < 0)
            return ckpt__fail(err, CKPT__D(UNSUPPORTED_DTYPE), path, t->name, -1,
                              "GGUF has no %s type: cast it (F32, F16, BF16, F64, I8-I64 or a block type such as Q8_0)",
                              ckpt_dtype_name(t->dtype));
        if (t->ndim > CKPT__GGUF_MAX_DIMS)
            return ckpt__fail(err, CKPT__D(GGUF_DIMS), path, t->name, -1, "%u dimensions, more than GGUF's %d", t->ndim,
                              CKPT__GGUF_MAX_DIMS);
        put_str(b, t->name, strlen(t->name));
        ckpt__put_le(b, t->ndim, 4);
        for (uint32_t d = 0; d < t->ndim; d++) ckpt__put_le(b, t->shape[t->ndim - 1 - d], 8);
        CKPT__PUT_FIELDS(b, {4, (uint32_t)ggml}, {8, rel});
        t->offset = rel;
        uint64_t padded = t->nbytes + (alignment - t->nbytes % alignment) % alignment;
        if (!ckpt__add_u64(rel, padded, &rel)) return ckpt__fail(err, CKPT__D(SHAPE_OVERFLOW), path, t->name, -1, "file size overflows");
    }
    static const char zeros[256];
    size_t pad = (alignment - b->len % alignment) % alignment;
    while (pad) {
        size_t k = pad < sizeof zeros ? pad : sizeof zeros;
        put(b, zeros, k);
        pad -= k;
    }
    if (b->failed) return ckpt__oom(err, path, "the GGUF header");
    for (size_t i = 0; i < count; i++) tensors[i].offset += b->len;
    *file_size = b->len + rel;
    return CKPT_OK;
}

/* ---- the output format (formats/output.h) ------------------------------------------- */

typedef struct gguf_state {
    uint32_t alignment;  /* the first file's: general.alignment */
    const char **keys;   /* the first file's key-values, general.architecture first */
    const char **values; /* as text (a string, or typed JSON a caller gave) */
    const ckpt__encoded **encoded; /* or encoded (a GGUF source's), NULL for text */
    size_t kv_count;
} gguf_state;

static bool is_split_key(const char *k) {
    return !strcmp(k, "split.no") || !strcmp(k, "split.count") || !strcmp(k, "split.tensors.count");
}

/* gguf-split's parts of a file "<prefix>.gguf": "<prefix>-NNNNN-of-NNNNN.gguf"
 * (any prefix: every split name). */
static bool gguf_owns(const char *prefix, const char *name) {
    if (!ckpt__gguf_is_split_name(name)) return false;
    size_t p = prefix ? strlen(prefix) : 0;
    return !prefix || (strlen(name) == p + 20 && !strncmp(name, prefix, p));
}

static unsigned gguf_needs(const ckpt_writer_options *o) {
    (void)o;
    return 0;
}

static ckpt_status gguf_accepts(const char *path, const char *name, ckpt_dtype dtype, uint32_t ndim,
                                const uint64_t *shape, ckpt_error *err) {
    (void)shape;
    if (ckpt_dtype_ggml_type(dtype) < 0)
        return ckpt__fail(err, CKPT__D(UNSUPPORTED_DTYPE), path, name, -1,
                          "GGUF has no %s type: cast it to F32, F16, BF16, F64, I8-I64 or a block type such as Q8_0",
                          ckpt_dtype_name(dtype));
    if (ndim > CKPT__GGUF_MAX_DIMS)
        return ckpt__fail(err, CKPT__D(GGUF_DIMS), path, name, -1, "%u dimensions, more than GGUF's %d", ndim,
                          CKPT__GGUF_MAX_DIMS);
    return CKPT_OK;
}

/* The key-values of the first file: every metadata entry (the files', then
 * the checkpoint's), general.architecture first as GGUFWriter puts it,
 * split keys dropped (each file gets its own). */
/* Pair i of `p` as the next key-value: encoded as it is, text as text. */
static void take_pair(gguf_state *s, const ckpt__pairs *p, size_t i) {
    const ckpt__encoded *e = ckpt__pairs_value(p, i);
    s->keys[s->kv_count] = p->keys[i];
    s->encoded[s->kv_count] = e;
    s->values[s->kv_count++] = e ? NULL : p->values[i];
}

/* general.alignment's value into *v, when it is a u32 (encoded, or typed
 * JSON); otherwise its text for a message into *text (malloc'ed). */
static bool alignment_u32(const gguf_state *s, size_t i, uint64_t *v, char **text) {
    const ckpt__encoded *e = s->encoded[i];
    *text = NULL;
    if (e && e->format == ckpt__gguf_encoding && ckpt__le32(e->bytes) == T_U32) { /* the reader's: type, u32 */
        *v = ckpt__le32(e->bytes + 4);
        return true;
    }
    char *owned = e ? e->json(e) : NULL;
    const char *t = e ? owned : s->values[i];
    uint32_t type = UINT32_MAX;
    bool ok = t && typed_value(t, &type, v) && type == T_U32;
    if (ok) free(owned);
    else *text = owned ? owned : ckpt__strdup(t ? t : "");
    return ok;
}

static ckpt_status gather_kvs(ckpt__output *o, gguf_state *s, ckpt_error *err) {
    const ckpt__pairs *fm = ckpt__out_file_metadata(o), *cm = ckpt__out_checkpoint_metadata(o);
    size_t cap = fm->count + cm->count + 1;
    s->keys = ckpt__arena_alloc(ckpt__out_arena(o), cap * sizeof *s->keys);
    s->values = ckpt__arena_alloc(ckpt__out_arena(o), cap * sizeof *s->values);
    s->encoded = ckpt__arena_alloc(ckpt__out_arena(o), cap * sizeof *s->encoded);
    if (!s->keys || !s->values || !s->encoded) return ckpt__oom(err, ckpt__out_path(o), NULL);
    int64_t arch = ckpt__pairs_find(fm, "general.architecture");
    if (arch >= 0) take_pair(s, fm, (size_t)arch);
    else if ((arch = ckpt__pairs_find(cm, "general.architecture")) >= 0) take_pair(s, cm, (size_t)arch);
    for (int pass = 0; pass < 2; pass++) {
        const ckpt__pairs *p = pass ? cm : fm;
        for (size_t i = 0; i < p->count; i++) {
            const char *k = p->keys[i];
            bool seen = !strcmp(k, "general.architecture") || is_split_key(k);
            for (size_t j = 0; !seen && j < s->kv_count; j++) seen = !strcmp(s->keys[j], k);
            if (!seen) take_pair(s, p, i);
        }
    }
    s->alignment = CKPT__GGUF_DEFAULT_ALIGNMENT;
    for (size_t i = 0; i < s->kv_count; i++) {
        if (strcmp(s->keys[i], "general.alignment") != 0) continue;
        uint64_t v = 0;
        char *text;
        if (!alignment_u32(s, i, &v, &text)) {
            ckpt_status st = ckpt__fail(err, CKPT__D(GGUF_KV_TYPE), ckpt__out_path(o), NULL, -1,
                                        "general.alignment must be a u32 ({\"gguf_type\": \"u32\", \"value\": 32}), "
                                        "not %s", text ? text : "that");
            free(text);
            return st;
        }
        if (v == 0 || (v & (v - 1)) || v > (1u << 30))
            return ckpt__fail(err, CKPT__D(GGUF_ALIGNMENT), ckpt__out_path(o), NULL, -1,
                              "general.alignment %llu is not a power of two", (unsigned long long)v);
        s->alignment = (uint32_t)v;
    }
    return CKPT_OK;
}

/* gguf-split's packing: a tensor starts a new file when the padded data
 * would pass max_shard_size, or after gguf->split_max_tensors tensors; every
 * file gets one tensor at least. */
static ckpt_status gguf_plan(ckpt__output *o, ckpt_error *err) {
    const ckpt_writer_options *opt = ckpt__out_options(o);
    const char *path = ckpt__out_path(o);
    if (opt->checksums)
        return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, path, NULL, -1,
                          "GGUF output has no place for checksums (they are a safetensors __metadata__ entry)");
    gguf_state *s = ckpt__arena_alloc(ckpt__out_arena(o), sizeof *s);
    if (!s) return ckpt__oom(err, path, NULL);
    memset(s, 0, sizeof *s);
    *ckpt__out_format_state(o) = s;
    ckpt_status st = gather_kvs(o, s, err);
    if (st) return st;
    size_t files = 1, in_file = 0, n = ckpt__out_count(o);
    uint64_t size = 0;
    for (size_t i = 0; i < n; i++) {
        ckpt__out_tensor *t = ckpt__out_tensor_at(o, i);
        uint64_t padded = t->nbytes + (s->alignment - t->nbytes % s->alignment) % s->alignment;
        bool by_size = opt->max_shard_size && size + padded > opt->max_shard_size;
        bool by_count = opt->gguf->split_max_tensors && in_file >= opt->gguf->split_max_tensors;
        if (in_file && (by_size || by_count)) files++, in_file = 0, size = 0;
        t->file = (uint32_t)(files - 1);
        in_file++;
        size += padded;
    }
    if (files > 99999) return ckpt__fail(err, CKPT_E_LIMIT, path, NULL, -1, "more than 99999 split files");
    char **names = ckpt__calloc(files, sizeof *names);
    if (!names) return ckpt__oom(err, path, NULL);
    /* An existing file or part of this name was refused, or listed for
     * replacement, when the writer was created. */
    for (size_t f = 0; st == CKPT_OK && f < files; f++) {
        names[f] = files == 1 ? ckpt__strdup(ckpt__path_basename(path)) : ckpt__gguf_split_path(ckpt__out_prefix(o), f, files);
        if (!names[f]) st = ckpt__oom(err, path, NULL);
    }
    if (st == CKPT_OK) st = ckpt__out_set_files(o, files, (const char *const *)names, err);
    for (size_t f = 0; f < files; f++) free(names[f]);
    free(names);
    return st;
}

/* A file's header, as GGUFWriter writes it: the first file's key-values,
 * then the split keys; the file's tensors in declaration order.  Parts
 * after the first have no general.alignment, so readers (ggml, gguf-py)
 * take them at the default 32: so does the layout (GGUFWriter pads them
 * with the first file's alignment, which its own reader then misreads). */
static ckpt_status gguf_layout(ckpt__output *o, uint32_t file, ckpt__buf *head, ckpt_error *err) {
    gguf_state *s = *ckpt__out_format_state(o);
    size_t total = ckpt__out_count(o), files = ckpt__out_file_count(o), n = 0, kv = 0;
    for (size_t i = 0; i < total; i++) n += ckpt__out_tensor_at(o, i)->file == file;
    ckpt__gguf_out_tensor *out = ckpt__malloc((n ? n : 1) * sizeof *out);
    size_t *ids = ckpt__malloc((n ? n : 1) * sizeof *ids);
    const char **keys = ckpt__malloc((s->kv_count + 3) * sizeof *keys);
    const char **values = ckpt__malloc((s->kv_count + 3) * sizeof *values);
    const ckpt__encoded **encoded = ckpt__malloc((s->kv_count + 3) * sizeof *encoded);
    const char *path = ckpt__out_file_path(o, file);
    ckpt_status st = CKPT_OK;
    if (!out || !ids || !keys || !values || !encoded) st = ckpt__oom(err, path, NULL);
    for (size_t i = 0; st == CKPT_OK && file == 0 && i < s->kv_count; i++)
        keys[kv] = s->keys[i], values[kv] = s->values[i], encoded[kv++] = s->encoded[i];
    unsigned char split_bytes[3][8];
    ckpt__encoded split[3];
    if (st == CKPT_OK && files > 1) {
        size_t count = 0;
        for (size_t i = 0; i < total; i++) count += ckpt__out_tensor_at(o, i)->file != CKPT__OUT_NONE;
        static const char *const split_keys[3] = {"split.no", "split.count", "split.tensors.count"};
        const uint32_t types[3] = {T_U16, T_U16, T_I32};
        const uint64_t numbers[3] = {file, files, count};
        for (int k = 0; k < 3; k++) {
            ckpt__store_le(split_bytes[k], types[k], 4);
            ckpt__store_le(split_bytes[k] + 4, numbers[k], types[k] == T_U16 ? 2 : 4);
            split[k] = (ckpt__encoded){ckpt__gguf_encoding, split_bytes[k], types[k] == T_U16 ? 6 : 8, NULL};
            keys[kv] = split_keys[k], values[kv] = NULL, encoded[kv++] = &split[k];
        }
    }
    size_t k = 0;
    for (size_t i = 0; st == CKPT_OK && i < total; i++) {
        const ckpt__out_tensor *t = ckpt__out_tensor_at(o, i);
        if (t->file != file) continue;
        ids[k] = i;
        out[k++] = (ckpt__gguf_out_tensor){.name = t->name, .dtype = t->dtype, .ndim = t->ndim, .shape = t->shape,
                                           .nbytes = t->nbytes};
    }
    uint64_t size = 0;
    if (st == CKPT_OK)
        st = render_header(path, keys, values, encoded, kv, out, n, file == 0 ? s->alignment : CKPT__GGUF_DEFAULT_ALIGNMENT,
                               head, &size, err);
    if (st == CKPT_OK) {
        for (size_t i = 0; i < n; i++) ckpt__out_tensor_at(o, ids[i])->offset = out[i].offset;
        ckpt__out_set_file_size(o, file, size);
    }
    free(out);
    free(ids);
    free(keys);
    free(values);
    free(encoded);
    return st;
}

static const char *const gguf_suffixes[] = {".gguf", NULL};

const ckpt__output_format ckpt__output_gguf = {
    .name = "gguf",
    .id = CKPT_FORMAT_GGUF,
    .suffixes = gguf_suffixes,
    .layouts = CKPT__LAYOUT_FILE | CKPT__LAYOUT_PARTS, /* one file, or gguf-split's parts beside it */
    .plan = gguf_plan,
    .layout = gguf_layout,
    .owns = gguf_owns,
    .needs = gguf_needs,
    .dedup = false,
    .accepts = gguf_accepts,
    .own_metadata_only = true,
    .metadata_pairs = ckpt__gguf_metadata_pairs,
};
