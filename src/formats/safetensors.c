/* safetensors.c — see safetensors.h. */
#include "safetensors.h"

#include "format.h"
#include "output.h"
#include "shards.h"

#include <stdio.h>
#include <xxhash.h>

#include <stdlib.h>
#include <string.h>

#include "../base/chunk_hash.h"
#include "../base/cursor.h"
#include "../io/file.h"

/* Checks the 8-byte prefix rules: file ≥ 8 bytes, N ≤ 100 MB, 8 + N ≤ file. */
static ckpt_status check_length(uint64_t file_size, uint64_t n, const char *path, ckpt_error *err) {
    if (file_size < 8)
        return ckpt__fail(err, CKPT__D(HEADER_TOO_SMALL), path, NULL, 0,
                          "file is %llu bytes, too small for the 8-byte header length",
                          (unsigned long long)file_size);
    if (n > CKPT__ST_MAX_HEADER)
        return ckpt__fail(err, CKPT__D(HEADER_TOO_LARGE), path, NULL, 0,
                          "header length %llu exceeds the limit of 100000000 bytes",
                          (unsigned long long)n);
    if (n > file_size - 8)
        return ckpt__fail(err, CKPT__D(HEADER_PAST_END), path, NULL, 0,
                          "header length %llu runs past the end of the %llu-byte file",
                          (unsigned long long)n, (unsigned long long)file_size);
    return CKPT_OK;
}

static const ckpt__json_node *member(const ckpt__json_doc *doc, size_t obj, const char *key,
                                     size_t *value_index) {
    size_t i = obj + 1;
    for (uint32_t k = 0; k < doc->nodes[obj].count; k++) {
        size_t v = doc->nodes[i].end;
        if (strcmp(doc->nodes[i].str, key) == 0) {
            if (value_index) *value_index = v;
            return &doc->nodes[v];
        }
        i = doc->nodes[v].end;
    }
    return NULL;
}

typedef struct ctx {
    const char *path;
    uint64_t base; /* file offset of the JSON text */
    ckpt_error *err;
    /* The last dtype name read and its dtype: a header names one or two
     * dtypes for thousands of tensors, and ckpt_dtype_from_name compares
     * a name with every dtype of its first letter ("F32": ten strcmps, 7%
     * of the instructions of opening 30,000 tensors). */
    const char *dtype_name;
    ckpt_dtype dtype;
} ctx;

static ckpt_status parse_metadata(const ctx *c, const ckpt__json_doc *doc, size_t v,
                                  ckpt__arena *arena, ckpt__st_header *out) {
    const ckpt__json_node *node = &doc->nodes[v];
    if (node->kind == CKPT__JSON_NULL) return CKPT_OK;
    if (node->kind != CKPT__JSON_OBJECT)
        return ckpt__fail(c->err, CKPT__D(HEADER_SCHEMA), c->path, NULL, (int64_t)(c->base + node->offset),
                          "__metadata__ must be an object of strings");
    out->meta_keys = ckpt__arena_alloc(arena, (node->count + 1) * sizeof(char *));
    out->meta_values = ckpt__arena_alloc(arena, (node->count + 1) * sizeof(char *));
    if (!out->meta_keys || !out->meta_values)
        return ckpt__fail(c->err, CKPT_E_NO_MEMORY, c->path, NULL, -1, "out of memory");
    size_t i = v + 1;
    for (uint32_t k = 0; k < node->count; k++) {
        const ckpt__json_node *key = &doc->nodes[i], *val = &doc->nodes[key->end];
        if (val->kind != CKPT__JSON_STRING)
            return ckpt__fail(c->err, CKPT__D(METADATA_NOT_STRING), c->path, NULL,
                              (int64_t)(c->base + val->offset),
                              "__metadata__ value of '%s' is not a string", key->str);
        for (size_t j = 0; j < out->meta_count; j++)
            if (strcmp(out->meta_keys[j], key->str) == 0)
                return ckpt__fail(c->err, CKPT__D(DUPLICATE_NAME), c->path, NULL,
                                  (int64_t)(c->base + key->offset), "duplicate __metadata__ key '%s'",
                                  key->str);
        out->meta_keys[out->meta_count] = key->str;
        out->meta_values[out->meta_count++] = val->str;
        i = val->end;
    }
    return CKPT_OK;
}

static ckpt_status parse_tensor(ctx *c, const ckpt__json_doc *doc, size_t key_index,
                                ckpt__arena *arena, ckpt__st_tensor *t) {
    const ckpt__json_node *key = &doc->nodes[key_index];
    size_t v = key->end;
    const ckpt__json_node *node = &doc->nodes[v];
    int64_t at = (int64_t)(c->base + key->offset);
    t->name = key->str;
    t->header_offset = (uint64_t)at;
    if (node->kind != CKPT__JSON_OBJECT)
        return ckpt__fail(c->err, CKPT__D(HEADER_SCHEMA), c->path, t->name, at,
                          "entry must be an object with dtype, shape and data_offsets");

    const ckpt__json_node *dtype = member(doc, v, "dtype", NULL);
    size_t shape_index = 0, offsets_index = 0;
    const ckpt__json_node *shape = member(doc, v, "shape", &shape_index);
    const ckpt__json_node *offsets = member(doc, v, "data_offsets", &offsets_index);
    if (!dtype || !shape || !offsets)
        return ckpt__fail(c->err, CKPT__D(HEADER_SCHEMA), c->path, t->name, at, "missing field '%s'",
                          !dtype ? "dtype" : !shape ? "shape" : "data_offsets");
    if (dtype->kind != CKPT__JSON_STRING)
        return ckpt__fail(c->err, CKPT__D(HEADER_SCHEMA), c->path, t->name,
                          (int64_t)(c->base + dtype->offset), "dtype must be a string");
    if (c->dtype_name && strcmp(dtype->str, c->dtype_name) == 0) {
        t->dtype = c->dtype;
    } else {
        t->dtype = ckpt_dtype_from_name(dtype->str);
        if (ckpt_dtype_is_block(t->dtype)) t->dtype = CKPT_DTYPE_INVALID; /* ggml's names are not safetensors' */
        if (t->dtype == CKPT_DTYPE_INVALID)
            return ckpt__fail(c->err, CKPT__D(UNKNOWN_DTYPE), c->path, t->name,
                              (int64_t)(c->base + dtype->offset), "unknown dtype '%s'", dtype->str);
        c->dtype_name = dtype->str;
        c->dtype = t->dtype;
    }

    if (shape->kind != CKPT__JSON_ARRAY)
        return ckpt__fail(c->err, CKPT__D(HEADER_SCHEMA), c->path, t->name,
                          (int64_t)(c->base + shape->offset), "shape must be an array of integers");
    if (shape->count > CKPT_MAX_DIMS)
        return ckpt__fail(c->err, CKPT__D(HEADER_SCHEMA), c->path, t->name,
                          (int64_t)(c->base + shape->offset), "shape has %u dimensions, more than %d",
                          shape->count, CKPT_MAX_DIMS);
    t->ndim = shape->count;
    t->shape = ckpt__arena_alloc(arena, (t->ndim ? t->ndim : 1) * sizeof(uint64_t));
    if (!t->shape) return ckpt__fail(c->err, CKPT_E_NO_MEMORY, c->path, NULL, -1, "out of memory");
    for (uint32_t d = 0; d < t->ndim; d++) {
        const ckpt__json_node *dim = &doc->nodes[shape_index + 1 + d];
        if (!ckpt__json_u64(dim, &t->shape[d]))
            return ckpt__fail(c->err, CKPT__D(HEADER_SCHEMA), c->path, t->name,
                              (int64_t)(c->base + dim->offset),
                              "shape[%u] is not a non-negative 64-bit integer", d);
    }

    if (offsets->kind != CKPT__JSON_ARRAY || offsets->count != 2 ||
        !ckpt__json_u64(&doc->nodes[offsets_index + 1], &t->begin) ||
        !ckpt__json_u64(&doc->nodes[offsets_index + 2], &t->end))
        return ckpt__fail(c->err, CKPT__D(HEADER_SCHEMA), c->path, t->name,
                          (int64_t)(c->base + offsets->offset),
                          "data_offsets must be two non-negative 64-bit integers");
    return CKPT_OK;
}

static int by_offsets(const void *a, const void *b) {
    const ckpt__st_tensor *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return 0;
}

/* Whether the tensors are in the order by_offsets sorts them into already,
 * as writers most often put them: qsort's merge sort still makes n log n
 * comparisons of a sorted array (3.6% of the instructions of opening
 * 30,000 tensors), where this pass makes n.  Equal offsets (empty tensors)
 * keep their header order, as glibc's merge sort, which is stable, kept
 * them (qsort itself promises no order among equals). */
static bool in_offset_order(const ckpt__st_header *h) {
    for (size_t i = 1; i < h->count; i++)
        if (by_offsets(&h->tensors[i - 1], &h->tensors[i]) > 0) return false;
    return true;
}

/* The reference's Metadata::validate, with a status per rule. */
static ckpt_status validate_layout(const ctx *c, ckpt__st_header *h, uint64_t file_size) {
    uint64_t cursor = 0;
    for (size_t i = 0; i < h->count; i++) {
        ckpt__st_tensor *t = &h->tensors[i];
        int64_t at = (int64_t)t->header_offset;
        if (t->end < t->begin)
            return ckpt__fail(c->err, CKPT__D(BAD_OFFSETS), c->path, t->name, at,
                              "data_offsets [%llu, %llu] end before they begin",
                              (unsigned long long)t->begin, (unsigned long long)t->end);
        if (t->begin > cursor)
            return ckpt__fail(c->err, CKPT__D(DATA_HOLE), c->path, t->name,
                              (int64_t)(h->data_start + cursor),
                              "%llu bytes before this tensor belong to no tensor (data_offsets "
                              "begin at %llu, previous data ends at %llu)",
                              (unsigned long long)(t->begin - cursor), (unsigned long long)t->begin,
                              (unsigned long long)cursor);
        if (t->begin < cursor)
            return ckpt__fail(c->err, CKPT__D(DATA_OVERLAP), c->path, t->name,
                              (int64_t)(h->data_start + t->begin),
                              "data_offsets begin at %llu, inside '%s' which ends at %llu",
                              (unsigned long long)t->begin, h->tensors[i - 1].name,
                              (unsigned long long)cursor);
        cursor = t->end;
        if (!ckpt__shape_numel(t->ndim, t->shape, &t->numel))
            return ckpt__fail(c->err, CKPT__D(SHAPE_OVERFLOW), c->path, t->name, at,
                              "the shape's nonzero axes hold more than 2^63-1 elements (safetensors refuses it)");
        ckpt_status st = ckpt__tensor_size(t->dtype, t->ndim, t->shape, &t->numel, &t->nbytes);
        if (st == CKPT__D(SHAPE_OVERFLOW))
            return ckpt__fail(c->err, st, c->path, t->name, at,
                              "the shape's nonzero axes hold more than 2^63-1 bytes of %s (safetensors refuses it)",
                              ckpt_dtype_name(t->dtype));
        if (st == CKPT__D(PARTIAL_BYTE))
            return ckpt__fail(c->err, st, c->path, t->name, at,
                              "%llu elements of %s are not a whole number of bytes",
                              (unsigned long long)t->numel, ckpt_dtype_name(t->dtype));
        if (t->end - t->begin != t->nbytes)
            return ckpt__fail(c->err, CKPT__D(SIZE_MISMATCH), c->path, t->name, at,
                              "shape and dtype %s need %llu bytes but data_offsets [%llu, %llu] hold %llu",
                              ckpt_dtype_name(t->dtype), (unsigned long long)t->nbytes,
                              (unsigned long long)t->begin, (unsigned long long)t->end,
                              (unsigned long long)(t->end - t->begin));
    }
    uint64_t data_size = file_size - h->data_start;
    if (cursor < data_size)
        return ckpt__fail(c->err, CKPT__D(TRAILING_BYTES), c->path, NULL, (int64_t)(h->data_start + cursor),
                          "%llu bytes after the last tensor belong to no tensor",
                          (unsigned long long)(data_size - cursor));
    if (cursor > data_size) {
        const ckpt__st_tensor *last = &h->tensors[h->count - 1];
        return ckpt__fail(c->err, CKPT_E_TRUNCATED, c->path, last->name, (int64_t)file_size,
                          "file ends %llu bytes before the end of this tensor's data",
                          (unsigned long long)(cursor - data_size));
    }
    return CKPT_OK;
}

ckpt_status ckpt__st_parse_header(char *header, uint64_t n, uint64_t file_size, const char *path,
                                  ckpt__arena *arena, ckpt__st_header *out, ckpt_error *err) {
    memset(out, 0, sizeof *out);
    out->data_start = 8 + n;
    ctx c = {path, 8, err};

    size_t bad = ckpt__utf8_check((const unsigned char *)header, (size_t)n);
    if (bad != n)
        return ckpt__fail(err, CKPT__D(HEADER_NOT_UTF8), path, NULL, (int64_t)(8 + bad),
                          "header byte 0x%02x is not valid UTF-8", (unsigned char)header[bad]);

    ckpt__json_doc doc;
    size_t at;
    const char *why;
    ckpt_status st = ckpt__json_parse_in(header, (size_t)n, arena->budget, &doc, &at, &why);
    if (st == CKPT_E_NO_MEMORY) return ckpt__fail(err, st, path, NULL, -1, "out of memory parsing the header");
    if (st == CKPT_E_LIMIT) return ckpt__fail(err, st, path, NULL, (int64_t)(8 + at), "header: %s", why);
    if (st) return ckpt__fail(err, CKPT__D(HEADER_NOT_JSON), path, NULL, (int64_t)(8 + at), "header is not JSON: %s", why);

    const ckpt__json_node *root = &doc.nodes[0];
    if (root->kind != CKPT__JSON_OBJECT) {
        int64_t at_root = (int64_t)(8 + root->offset);
        ckpt__json_free(&doc);
        return ckpt__fail(err, CKPT__D(HEADER_SCHEMA), path, NULL, at_root, "header must be a JSON object");
    }
    /* each member may be a tensor: its entry here and in the catalog */
    st = ckpt__budget_charge(arena->budget, (uint64_t)root->count * (sizeof *out->tensors + ckpt__cat_tensor_cost(1)), err,
                             path, (int64_t)(8 + root->offset));
    if (st) {
        ckpt__json_free(&doc);
        return st;
    }
    out->tensors = ckpt__malloc((root->count ? root->count : 1) * sizeof *out->tensors);
    ckpt__name_table names = {0};
    if (!out->tensors || !ckpt__name_table_init(&names, root->count)) {
        st = ckpt__fail(err, CKPT_E_NO_MEMORY, path, NULL, -1, "out of memory");
        goto done;
    }
    bool seen_metadata = false;
    size_t i = 1;
    for (uint32_t k = 0; k < root->count && st == CKPT_OK; k++) {
        const ckpt__json_node *key = &doc.nodes[i];
        size_t v = key->end;
        if (strcmp(key->str, "__metadata__") == 0) {
            if (seen_metadata)
                st = ckpt__fail(err, CKPT__D(DUPLICATE_NAME), path, NULL, (int64_t)(8 + key->offset),
                                "__metadata__ appears twice");
            else
                st = parse_metadata(&c, &doc, v, arena, out);
            seen_metadata = true;
        } else {
            ckpt__st_tensor *t = &out->tensors[out->count];
            st = parse_tensor(&c, &doc, i, arena, t);
            uint32_t prev;
            if (st == CKPT_OK &&
                !ckpt__name_table_insert(&names, &out->tensors[0].name, sizeof *t, (uint32_t)out->count, &prev))
                st = ckpt__fail(err, CKPT__D(DUPLICATE_NAME), path, t->name, (int64_t)t->header_offset,
                                "tensor name appears twice in the header (first at byte %llu)",
                                (unsigned long long)out->tensors[prev].header_offset);
            out->count++;
        }
        i = doc.nodes[v].end;
    }
    if (st == CKPT_OK) {
        if (!in_offset_order(out)) qsort(out->tensors, out->count, sizeof *out->tensors, by_offsets);
        st = validate_layout(&c, out, file_size);
    }
done:
    ckpt__name_table_free(&names);
    ckpt__json_free(&doc);
    if (st) ckpt__st_header_free(out);
    return st;
}

ckpt_status ckpt__st_read_header(ckpt__source *src, ckpt__arena *arena, ckpt__st_header *out, ckpt_error *err) {
    uint64_t file_size = src->size;
    const char *path = src->name;
    memset(out, 0, sizeof *out);
    unsigned char prefix[8];
    if (file_size < 8) return check_length(file_size, 0, path, err);
    ckpt_status st = ckpt__source_read(src, prefix, 8, 0, err);
    if (st) return st;
    uint64_t n = ckpt__le64(prefix);
    st = check_length(file_size, n, path, err);
    if (st) return st;
    /* The header text lives in the arena: names point into it. */
    if ((st = ckpt__budget_charge(arena->budget, n + 1, err, path, 8))) return st;
    char *header = ckpt__arena_alloc(arena, (size_t)n + 1);
    if (!header) return ckpt__fail(err, CKPT_E_NO_MEMORY, path, NULL, -1, "cannot allocate the header");
    st = ckpt__source_read(src, header, n, 8, err);
    if (st == CKPT_OK) st = ckpt__st_parse_header(header, n, file_size, path, arena, out, err);
    return st;
}

void ckpt__st_header_free(ckpt__st_header *header) {
    free(header->tensors);
    header->tensors = NULL;
    header->count = 0;
}

/* ---- writing ----------------------------------------------------------- */

static int by_dtype_then_name(const void *a, const void *b) {
    const ckpt__st_out_tensor *x = a, *y = b;
    if (x->dtype != y->dtype) return x->dtype > y->dtype ? -1 : 1;
    return strcmp(x->name, y->name);
}

ckpt_status ckpt__st_layout(ckpt__st_out_tensor *tensors, size_t count, const char *const *meta_keys,
                            const char *const *meta_values, size_t meta_count, ckpt__buf *out,
                            uint64_t *data_size) {
    if (count) qsort(tensors, count, sizeof *tensors, by_dtype_then_name);
    ckpt__buf json = {0};
    ckpt__buf_append(&json, "{", 1);
    bool first = true;
    if (meta_count) {
        ckpt__buf_puts(&json, "\"__metadata__\":{");
        for (size_t i = 0; i < meta_count; i++) {
            if (i) ckpt__buf_append(&json, ",", 1);
            ckpt__buf_json_string(&json, meta_keys[i]);
            ckpt__buf_append(&json, ":", 1);
            ckpt__buf_json_string(&json, meta_values[i]);
        }
        ckpt__buf_append(&json, "}", 1);
        first = false;
    }
    uint64_t offset = 0;
    for (size_t i = 0; i < count; i++) {
        ckpt__st_out_tensor *t = &tensors[i];
        if (!first) ckpt__buf_append(&json, ",", 1);
        first = false;
        ckpt__buf_json_string(&json, t->name);
        ckpt__buf_puts(&json, ":{\"dtype\":");
        ckpt__buf_json_string(&json, ckpt_dtype_name(t->dtype));
        ckpt__buf_puts(&json, ",\"shape\":[");
        for (uint32_t d = 0; d < t->ndim; d++) {
            if (d) ckpt__buf_append(&json, ",", 1);
            ckpt__buf_u64(&json, t->shape[d]);
        }
        ckpt__buf_puts(&json, "],\"data_offsets\":[");
        t->begin = offset;
        ckpt__buf_u64(&json, offset);
        ckpt__buf_append(&json, ",", 1);
        if (!ckpt__add_u64(offset, t->nbytes, &offset)) {
            free(json.data);
            return CKPT__D(SHAPE_OVERFLOW);
        }
        ckpt__buf_u64(&json, offset);
        ckpt__buf_puts(&json, "]}");
    }
    ckpt__buf_append(&json, "}", 1);
    while (!json.failed && json.len % 8) ckpt__buf_append(&json, " ", 1); /* a failed buffer stops growing */
    if (json.failed || json.len > CKPT__ST_MAX_HEADER) {
        free(json.data);
        return json.failed ? CKPT_E_NO_MEMORY : CKPT_E_LIMIT;
    }
    unsigned char prefix[8];
    ckpt__store_le(prefix, json.len, 8);
    ckpt__buf_append(out, (const char *)prefix, 8);
    ckpt__buf_append(out, json.data, json.len);
    free(json.data);
    if (out->failed) return CKPT_E_NO_MEMORY;
    *data_size = offset;
    return CKPT_OK;
}

/* ---- the format ---------------------------------------------------------- */

static int st_probe(const unsigned char *head, size_t n, const char *name) {
    (void)name;
    /* The 8-byte header length, then JSON: its object after any whitespace. */
    for (size_t i = 8; i < n; i++) {
        if (head[i] == '{') return CKPT__PROBE_MAGIC;
        if (head[i] != ' ' && head[i] != '\t' && head[i] != '\n' && head[i] != '\r') break;
    }
    /* Anything else is still judged by safetensors' rules, whose errors say
     * precisely what is wrong with a damaged file. */
    return CKPT__PROBE_FALLBACK;
}

static ckpt_status st_open(ckpt_catalog *c, ckpt__source *src, ckpt_error *err) {
    uint32_t file;
    ckpt_status st = ckpt__cat_add_source(c, src, &file, err);
    if (st) return st;
    ckpt__st_header h;
    if ((st = ckpt__st_read_header(src, ckpt__cat_arena(c), &h, err))) return st;
    for (size_t i = 0; st == CKPT_OK && i < h.count; i++) {
        const ckpt__st_tensor *s = &h.tensors[i];
        ckpt__piece piece = {.file = file, .offset = h.data_start + s->begin};
        ckpt__tensor_decl d = {s->name, s->dtype, s->ndim, s->shape, CKPT__OWN_STORAGE, &piece, 1};
        st = ckpt__cat_add_tensor(c, &d, err);
    }
    for (size_t i = 0; st == CKPT_OK && i < h.meta_count; i++)
        st = ckpt__cat_add_metadata(c, file, h.meta_keys[i], h.meta_values[i], err);
    ckpt__st_header_free(&h);
    ckpt__cat_set_format(c, CKPT_FORMAT_SAFETENSORS);
    return st;
}

/* ---- ckpt's XXH3-64 digests, checked by ckpt_verify ------------------------ */

static bool parse_hex64(const char *s, size_t len, uint64_t *out) {
    if (len != 16) return false;
    uint64_t v = 0;
    for (size_t i = 0; i < 16; i++) {
        char c = s[i];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
        if (d < 0) return false;
        v = v << 4 | (uint64_t)d;
    }
    *out = v;
    return true;
}

/* A parsed map's placeholder text, as the writer rendered it: each value
 * zeros of its length, but the one under `keep` as it is. */
static void zero_form(const ckpt__json_doc *doc, const char *keep, ckpt__buf *out) {
    ckpt__buf_puts(out, "{");
    size_t i = 1;
    for (uint32_t k = 0; k < doc->nodes[0].count; k++) {
        const ckpt__json_node *key = &doc->nodes[i], *val = &doc->nodes[key->end];
        if (k) ckpt__buf_puts(out, ",");
        ckpt__buf_json_string(out, key->str);
        ckpt__buf_puts(out, ":\"");
        for (uint32_t c = 0; c < val->len; c++) ckpt__buf_append(out, keep && !strcmp(key->str, keep) ? val->str + c : "0", 1);
        ckpt__buf_puts(out, "\"");
        i = val->end;
    }
    ckpt__buf_puts(out, "}");
}

/* A map as it appears in the header (escaped), and its placeholder form. */
typedef struct st_map_forms {
    ckpt__buf actual, zeros;
} st_map_forms;

static void map_forms(const char *map, const ckpt__json_doc *doc, const char *keep, st_map_forms *m) {
    ckpt__buf placeholder = {0};
    zero_form(doc, keep, &placeholder);
    ckpt__buf_json_string(&m->actual, map);
    ckpt__buf_json_string(&m->zeros, placeholder.data ? placeholder.data : "");
    if (placeholder.failed) m->zeros.failed = true;
    free(placeholder.data);
}

/* The header check: the header as written hashed with its maps in their
 * placeholder form (every digest zero), as the writer hashed it. */
static ckpt_status verify_header(const ckpt_catalog *cat, uint32_t file, st_map_forms *maps, size_t count,
                                 uint64_t want, ckpt_error *err) {
    const char *path = ckpt_catalog_file_path(cat, file);
    ckpt__source *src = ckpt__cat_source(cat, file);
    unsigned char prefix[8];
    uint64_t n = 0;
    char *header = NULL;
    ckpt_status st = CKPT_OK;
    for (size_t m = 0; m < count; m++)
        if (maps[m].actual.failed || maps[m].zeros.failed) st = ckpt__fail(err, CKPT_E_NO_MEMORY, path, NULL, -1, "out of memory");
    if (st == CKPT_OK) st = ckpt__source_read(src, prefix, 8, 0, err);
    if (st == CKPT_OK) {
        n = ckpt__le64(prefix);
        header = ckpt__malloc((size_t)n + 8);
        st = header ? ckpt__source_read(src, header, n + 8, 0, err)
                    : ckpt__fail(err, CKPT_E_NO_MEMORY, path, NULL, -1, "out of memory");
    }
    for (size_t m = 0; st == CKPT_OK && m < count; m++) {
        char *at = maps[m].actual.len == maps[m].zeros.len
                       ? memmem(header, (size_t)n + 8, maps[m].actual.data, maps[m].actual.len) : NULL;
        if (!at) st = ckpt__fail(err, CKPT__D(CHECKSUM), path, NULL, 8, "the checksum map does not match the header's layout");
        else memcpy(at, maps[m].zeros.data, maps[m].zeros.len);
    }
    if (st == CKPT_OK) {
        uint64_t got = XXH3_64bits(header, (size_t)n + 8);
        if (got != want)
            st = ckpt__fail(err, CKPT__D(CHECKSUM), path, NULL, 8,
                            "header checksum is %016llx, the file records %016llx: the header changed",
                            (unsigned long long)got, (unsigned long long)want);
    }
    free(header);
    return st;
}

/* A map's text parsed as a JSON object (CKPT__D(CHECKSUM) naming `key` if
 * it is not one); *text holds the parsed copy. */
static ckpt_status parse_map(const ckpt_catalog *cat, uint32_t file, const char *key, const char *map, char **text,
                             ckpt__json_doc *doc, ckpt_error *err) {
    const char *path = ckpt_catalog_file_path(cat, file);
    size_t len = strlen(map);
    if (!(*text = ckpt__malloc(len + 1))) return ckpt__fail(err, CKPT_E_NO_MEMORY, path, NULL, -1, "out of memory");
    memcpy(*text, map, len + 1);
    size_t at;
    const char *why;
    ckpt_status st = ckpt__json_parse(*text, len, doc, &at, &why);
    if (st == CKPT_OK && doc->nodes[0].kind == CKPT__JSON_OBJECT) return CKPT_OK;
    if (st == CKPT_OK) ckpt__json_free(doc);
    free(*text);
    *text = NULL;
    return ckpt__fail(err, CKPT__D(CHECKSUM), path, NULL, -1, "%s is not a JSON object of checksums", key);
}

/* The header's recorded digest in a checksum map (*has_header when it
 * records one: "__metadata__"). */
static ckpt_status header_digest_of(const ckpt_catalog *cat, uint32_t file, const ckpt__json_doc *doc,
                                    uint64_t *digest, bool *has_header, ckpt_error *err) {
    size_t i = 1;
    for (uint32_t k = 0; k < doc->nodes[0].count; k++) {
        const ckpt__json_node *key = &doc->nodes[i], *val = &doc->nodes[key->end];
        if (!strcmp(key->str, "__metadata__")) {
            *has_header = true;
            if (val->kind != CKPT__JSON_STRING || !parse_hex64(val->str, val->len, digest))
                return ckpt__fail(err, CKPT__D(CHECKSUM), ckpt_catalog_file_path(cat, file), key->str, -1,
                                  "checksum is not 16 hex digits");
        }
        i = val->end;
    }
    return CKPT_OK;
}

/* The tensors named in one file's checksum map, to hash. */
static ckpt_status read_digests(const ckpt_catalog *cat, uint32_t file, const ckpt__json_doc *doc,
                                ckpt__file_checks *checks, ckpt_error *err) {
    const char *path = ckpt_catalog_file_path(cat, file);
    ckpt_status st = CKPT_OK;
    size_t i = 1;
    for (uint32_t k = 0; k < doc->nodes[0].count && st == CKPT_OK; k++) {
        const ckpt__json_node *key = &doc->nodes[i], *val = &doc->nodes[key->end];
        uint64_t want = 0;
        const ckpt_tensor_info *t = ckpt_catalog_find(cat, key->str);
        if (val->kind != CKPT__JSON_STRING || !parse_hex64(val->str, val->len, &want))
            st = ckpt__fail(err, CKPT__D(CHECKSUM), path, key->str, -1, "checksum is not 16 hex digits");
        else if (!strcmp(key->str, "__metadata__"))
            ; /* the header's: header_digest_of */
        else if (!t || t->file != file)
            st = ckpt__fail(err, CKPT__D(INDEX_MISMATCH), path, key->str, -1,
                            "the checksum map names a tensor this file does not hold");
        else if (!ckpt__file_checks_add(checks, t, want))
            st = ckpt__oom(err, path, NULL);
        i = val->end;
    }
    return st;
}

/* One tensor's chunk digests (a string of 16-hex-digit digests). */
static ckpt_status read_tensor_chunks(const ckpt_catalog *cat, uint32_t file, const ckpt__json_node *key,
                                      const ckpt__json_node *val, uint64_t chunk, ckpt__file_checks *checks,
                                      ckpt_error *err) {
    const char *path = ckpt_catalog_file_path(cat, file);
    const ckpt_tensor_info *t = ckpt_catalog_find(cat, key->str);
    if (!t || t->file != file)
        return ckpt__fail(err, CKPT__D(INDEX_MISMATCH), path, key->str, -1,
                          "the chunk map names a tensor this file does not hold");
    size_t count = val->kind == CKPT__JSON_STRING ? val->len / 16 : 0;
    if (val->kind != CKPT__JSON_STRING || val->len % 16 || count != ckpt__chunk_count(t->nbytes, chunk))
        return ckpt__fail(err, CKPT__D(CHECKSUM), path, key->str, -1,
                          "its chunk checksums are not %u digests of 16 hex digits",
                          (unsigned)ckpt__chunk_count(t->nbytes, chunk));
    ckpt__chunk_digests rec = {t, chunk, t->offset % chunk, checks->chunk_xxh3.len / sizeof(uint64_t), count};
    for (size_t c = 0; c < count; c++) {
        uint64_t d;
        if (!parse_hex64(val->str + 16 * c, 16, &d))
            return ckpt__fail(err, CKPT__D(CHECKSUM), path, key->str, -1, "chunk checksum %zu is not 16 hex digits", c);
        ckpt__buf_append(&checks->chunk_xxh3, (const char *)&d, sizeof d);
    }
    ckpt__buf_append(&checks->chunks, (const char *)&rec, sizeof rec);
    return ckpt__file_checks_failed(checks) ? ckpt__oom(err, path, NULL) : CKPT_OK;
}

/* The tensors named in one file's chunk map, to hash chunk by chunk. */
static ckpt_status read_chunks(const ckpt_catalog *cat, uint32_t file, const ckpt__json_doc *doc,
                               ckpt__file_checks *checks, ckpt_error *err) {
    const char *path = ckpt_catalog_file_path(cat, file);
    const ckpt__json_node *first = doc->nodes[0].count ? &doc->nodes[1] : NULL;
    const ckpt__json_node *size = first ? &doc->nodes[first->end] : NULL;
    char *end = NULL;
    unsigned long long chunk = size && size->kind == CKPT__JSON_STRING ? strtoull(size->str, &end, 10) : 0;
    if (!first || strcmp(first->str, "__chunk_bytes__") || !end || *end || !chunk || chunk % 4096)
        return ckpt__fail(err, CKPT__D(CHECKSUM), path, NULL, -1,
                          "%s does not begin with __chunk_bytes__, a multiple of 4096", CKPT_CHUNK_METADATA_KEY);
    ckpt_status st = CKPT_OK;
    size_t i = size->end;
    for (uint32_t k = 1; k < doc->nodes[0].count && st == CKPT_OK; k++) {
        const ckpt__json_node *key = &doc->nodes[i], *val = &doc->nodes[key->end];
        st = read_tensor_chunks(cat, file, key, val, chunk, checks, err);
        i = val->end;
    }
    return st;
}

/* A key one byte away from the checksum key is a damaged checksum key, not
 * a file without checksums. */
static ckpt_status check_key_intact(const ckpt_catalog *cat, uint32_t file, ckpt_error *err) {
    const ckpt__pairs *meta = ckpt__cat_file_metadata(cat, file);
    const char *want = CKPT_CHECKSUM_METADATA_KEY;
    size_t n = strlen(want);
    for (size_t i = 0; i < meta->count; i++) {
        const char *k = meta->keys[i];
        if (strlen(k) != n) continue;
        size_t diff = 0;
        for (size_t j = 0; j < n; j++) diff += k[j] != want[j];
        if (diff == 1)
            return ckpt__fail(err, CKPT__D(CHECKSUM), ckpt_catalog_file_path(cat, file), NULL, -1,
                              "metadata key '%s' looks like a damaged '%s'", k, want);
    }
    return CKPT_OK;
}

/* The digests a file records under CKPT_CHECKSUM_METADATA_KEY (the
 * writer's checksums option) and CKPT_CHUNK_METADATA_KEY: the header's
 * checked here, the tensors' and their chunks' given to ckpt_verify to
 * hash. */
static ckpt_status st_verify(const ckpt_catalog *cat, uint32_t file, ckpt__file_checks *checks, ckpt_error *err) {
    const char *map = ckpt_catalog_file_metadata(cat, file, CKPT_CHECKSUM_METADATA_KEY);
    const char *chunks = ckpt_catalog_file_metadata(cat, file, CKPT_CHUNK_METADATA_KEY);
    if (!map && chunks)
        return ckpt__fail(err, CKPT__D(CHECKSUM), ckpt_catalog_file_path(cat, file), NULL, -1,
                          "%s without %s: the header changed", CKPT_CHUNK_METADATA_KEY, CKPT_CHECKSUM_METADATA_KEY);
    if (!map) return check_key_intact(cat, file, err);
    ckpt__json_doc doc, chunk_doc;
    char *text = NULL, *chunk_text = NULL;
    st_map_forms forms[2] = {0};
    uint64_t header_digest = 0;
    bool has_header = false;
    ckpt_status st = parse_map(cat, file, CKPT_CHECKSUM_METADATA_KEY, map, &text, &doc, err);
    if (st) return st;
    bool chunk_parsed = false;
    if (chunks && (st = parse_map(cat, file, CKPT_CHUNK_METADATA_KEY, chunks, &chunk_text, &chunk_doc, err)) == CKPT_OK)
        chunk_parsed = true;
    /* The header first: a changed header is said as such, whatever else it changed. */
    if (st == CKPT_OK) st = header_digest_of(cat, file, &doc, &header_digest, &has_header, err);
    if (st == CKPT_OK) map_forms(map, &doc, NULL, &forms[0]);
    if (st == CKPT_OK && chunks) map_forms(chunks, &chunk_doc, "__chunk_bytes__", &forms[1]);
    if (st == CKPT_OK && has_header && (st = verify_header(cat, file, forms, chunks ? 2 : 1, header_digest, err)) == CKPT_OK)
        checks->headers++;
    if (st == CKPT_OK) st = read_digests(cat, file, &doc, checks, err);
    if (st == CKPT_OK && chunks) st = read_chunks(cat, file, &chunk_doc, checks, err);
    if (chunk_parsed) ckpt__json_free(&chunk_doc);
    for (size_t m = 0; m < 2; m++) free(forms[m].actual.data), free(forms[m].zeros.data);
    ckpt__json_free(&doc);
    free(text);
    free(chunk_text);
    return st;
}

const ckpt__format ckpt__format_safetensors = {"safetensors", CKPT_FORMAT_SAFETENSORS, st_probe, st_open, NULL, st_verify};

/* ---- the output format: one file, or Hugging Face shards and an index ---- */

typedef struct st_file {
    uint64_t checksum_at;   /* where the escaped checksum map sits in the header (0: none) */
    size_t checksum_len;
    uint64_t chunks_at;     /* where the escaped chunk map sits (0: none) */
    size_t chunks_len;
    uint64_t header_digest; /* XXH3-64 of the header with the placeholder map */
} st_file;

typedef struct st_state {
    st_file *files;
    uint64_t index_total; /* huggingface_hub's total_size: shared storages counted once, whole */
} st_state;

static st_state *state_of(ckpt__output *o) { return *ckpt__out_format_state(o); }

static unsigned st_needs(const ckpt_writer_options *o) { return o->checksums ? CKPT__OUT_XXH3 : 0; }

static bool st_owns(const char *prefix, const char *name) {
    if (prefix) return ckpt__shards_is_own_file(prefix, name);
    /* Any prefix: "<prefix>[-NNNNN-of-NNNNN].safetensors[.index.json]", the
     * prefix not empty (a shard's number then reads as part of it). */
    size_t n = strlen(name);
    return (n > 12 && !strcmp(name + n - 12, ".safetensors")) ||
           (n > 23 && !strcmp(name + n - 23, ".safetensors.index.json"));
}

/* Shards as split_torch_state_dict_into_shards makes them: tensors in
 * declaration order, each storage counted once and whole; a tensor on a
 * storage already seen joins that tensor's shard. */
static ckpt_status st_plan(ckpt__output *o, ckpt_error *err) {
    const ckpt_writer_options *opt = ckpt__out_options(o);
    size_t n = ckpt__out_count(o), count = 0, shards = 1;
    st_state *s = ckpt__arena_alloc(ckpt__out_arena(o), sizeof *s);
    uint64_t *sizes = ckpt__malloc((n ? n : 1) * sizeof *sizes);
    uint32_t *shard_of = ckpt__malloc((n ? n : 1) * sizeof *shard_of);
    size_t *rank = ckpt__malloc((n ? n : 1) * sizeof *rank), *leaders = ckpt__malloc((n ? n : 1) * sizeof *leaders);
    ckpt_status st = !s || !sizes || !shard_of || !rank || !leaders ? ckpt__oom(err, ckpt__out_path(o), NULL)
                                                                    : ckpt__out_storage_ranks(o, rank, true, err);
    if (s) memset(s, 0, sizeof *s), *ckpt__out_format_state(o) = s;
    for (size_t i = 0; st == CKPT_OK && i < n; i++) {
        const ckpt__out_tensor *t = ckpt__out_tensor_at(o, i);
        if (t->file == CKPT__OUT_NONE || rank[i] != i) continue;
        leaders[count] = i;
        sizes[count++] = t->storage->id && t->storage->contiguous ? t->storage->nbytes : t->nbytes;
        s->index_total += sizes[count - 1];
    }
    if (st == CKPT_OK && opt->max_shard_size && count) shards = ckpt__shards_pack(sizes, count, opt->max_shard_size, shard_of);
    for (size_t k = 0; st == CKPT_OK && k < count; k++)
        ckpt__out_tensor_at(o, leaders[k])->file = opt->max_shard_size ? shard_of[k] : 0;
    for (size_t i = 0; st == CKPT_OK && i < n; i++) {
        ckpt__out_tensor *t = ckpt__out_tensor_at(o, i);
        if (t->file != CKPT__OUT_NONE && rank[i] != i) t->file = ckpt__out_tensor_at(o, rank[i])->file;
    }
    char **names = st == CKPT_OK ? ckpt__calloc(shards, sizeof *names) : NULL;
    if (st == CKPT_OK && !names) st = ckpt__oom(err, ckpt__out_path(o), NULL);
    /* A file destination that fits in one file is that file; else shards
     * named after the directory's prefix, or the file's stem. */
    bool named_file = !ckpt__out_directory(o) && shards == 1;
    for (size_t f = 0; st == CKPT_OK && f < shards; f++) {
        names[f] = named_file ? ckpt__strdup(ckpt__path_basename(ckpt__out_path(o)))
                              : ckpt__shard_file_name(ckpt__out_prefix(o), f, shards);
        if (!names[f]) st = ckpt__oom(err, ckpt__out_path(o), NULL);
    }
    if (st == CKPT_OK) st = ckpt__out_set_files(o, shards, (const char *const *)names, err);
    if (st == CKPT_OK && !(s->files = ckpt__arena_alloc(ckpt__out_arena(o), shards * sizeof *s->files)))
        st = ckpt__oom(err, ckpt__out_path(o), NULL);
    if (st == CKPT_OK) memset(s->files, 0, shards * sizeof *s->files);
    for (size_t f = 0; names && f < shards; f++) free(names[f]);
    free(names);
    free(sizes);
    free(shard_of);
    free(rank);
    free(leaders);
    return st;
}

/* The checksum map of a file's tensors (declaration order), as JSON text:
 * with digests, or zeros as a placeholder of the same length.  malloc'ed;
 * NULL when out of memory. */
static char *checksum_map(ckpt__output *o, uint32_t file, bool placeholder) {
    ckpt__buf b = {0};
    /* "__metadata__" (never a tensor name) holds the header's own digest. */
    char hex[40];
    snprintf(hex, sizeof hex, "{\"__metadata__\":\"%016llx\"",
             (unsigned long long)(placeholder ? 0 : state_of(o)->files[file].header_digest));
    ckpt__buf_puts(&b, hex);
    for (size_t i = 0; i < ckpt__out_count(o); i++) {
        const ckpt__out_tensor *t = ckpt__out_tensor_at(o, i);
        if (t->file != file) continue;
        ckpt__buf_puts(&b, ",");
        ckpt__buf_json_string(&b, t->name);
        snprintf(hex, sizeof hex, ":\"%016llx\"", (unsigned long long)(placeholder ? 0 : t->xxh3));
        ckpt__buf_puts(&b, hex);
    }
    ckpt__buf_puts(&b, "}");
    if (b.failed) {
        free(b.data);
        return NULL;
    }
    return b.data;
}

/* Whether a tensor of this file gets chunk digests (CKPT_CHUNK_METADATA_KEY). */
static bool chunked(const ckpt__out_tensor *t) { return t->nbytes >= CKPT_CHUNKED_MIN_BYTES; }

/* The chunk map of a file's large tensors, as JSON text, or zeros as a
 * placeholder of the same length (every tensor has ckpt__chunk_count
 * chunks wherever it lands); NULL when no tensor of the file is large
 * enough, or out of memory (*failed). */
static char *chunk_map(ckpt__output *o, uint32_t file, bool placeholder, bool *failed) {
    ckpt__buf b = {0};
    char hex[40];
    snprintf(hex, sizeof hex, "{\"__chunk_bytes__\":\"%llu\"", (unsigned long long)CKPT_CHUNK_BYTES);
    ckpt__buf_puts(&b, hex);
    size_t listed = 0;
    for (size_t i = 0; i < ckpt__out_count(o); i++) {
        const ckpt__out_tensor *t = ckpt__out_tensor_at(o, i);
        if (t->file != file || !chunked(t)) continue;
        ckpt__buf_puts(&b, ",");
        ckpt__buf_json_string(&b, t->name);
        ckpt__buf_puts(&b, ":\"");
        for (uint32_t k = 0; k < ckpt__chunk_count(t->nbytes, CKPT_CHUNK_BYTES); k++) {
            snprintf(hex, sizeof hex, "%016llx", (unsigned long long)(placeholder ? 0 : t->chunk_xxh3[k]));
            ckpt__buf_puts(&b, hex);
        }
        ckpt__buf_puts(&b, "\"");
        listed++;
    }
    ckpt__buf_puts(&b, "}");
    *failed = b.failed;
    if (b.failed || !listed) {
        free(b.data);
        return NULL;
    }
    return b.data;
}

/* Where a map's placeholder landed in the rendered header: *at and *len of
 * its escaped text (0, 0 when absent). */
static ckpt_status find_escaped(const ckpt__buf *header, const char *placeholder, uint64_t *at, size_t *len,
                                const char *path, ckpt_error *err) {
    ckpt__buf escaped = {0};
    ckpt__buf_json_string(&escaped, placeholder);
    if (escaped.failed) return ckpt__oom(err, path, NULL);
    const char *found = memmem(header->data, header->len, escaped.data, escaped.len);
    if (found) *at = (uint64_t)(found - header->data), *len = escaped.len;
    free(escaped.data);
    return found ? CKPT_OK : ckpt__fail(err, CKPT_E_BAD_STATE, path, NULL, -1, "checksum placeholder not found in the header");
}

/* A file's large tensors, once laid out: where their chunk digests go. */
static ckpt_status give_chunks(ckpt__output *o, uint32_t file, ckpt_error *err) {
    for (size_t i = 0; i < ckpt__out_count(o); i++) {
        ckpt__out_tensor *t = ckpt__out_tensor_at(o, i);
        if (t->file != file || !chunked(t)) continue;
        t->chunk_bytes = CKPT_CHUNK_BYTES;
        t->chunk_count = ckpt__chunk_count(t->nbytes, CKPT_CHUNK_BYTES);
        t->chunk_xxh3 = ckpt__arena_alloc(ckpt__out_arena(o), t->chunk_count * sizeof *t->chunk_xxh3);
        if (!t->chunk_xxh3) return ckpt__oom(err, ckpt__out_file_path(o, file), NULL);
    }
    return CKPT_OK;
}

/* Finds where the placeholder map landed in the rendered header. */
static ckpt_status locate_checksums(ckpt__output *o, uint32_t file, const ckpt__buf *header, const char *placeholder,
                                    ckpt_error *err) {
    st_file *f = &state_of(o)->files[file];
    ckpt_status st = find_escaped(header, placeholder, &f->checksum_at, &f->checksum_len, ckpt__out_file_path(o, file), err);
    if (st == CKPT_OK) f->header_digest = XXH3_64bits(header->data, header->len);
    return st;
}

/* A file's header: its tensors laid out as safetensors' writer does, its
 * metadata (the checkpoint's own as well when it is the only file). */
static ckpt_status st_layout(ckpt__output *o, uint32_t file, ckpt__buf *head, ckpt_error *err) {
    size_t n = 0, total = ckpt__out_count(o);
    for (size_t i = 0; i < total; i++) n += ckpt__out_tensor_at(o, i)->file == file;
    ckpt__st_out_tensor *out = ckpt__malloc((n ? n : 1) * sizeof *out);
    if (!out) return ckpt__oom(err, ckpt__out_file_path(o, file), NULL);
    size_t k = 0;
    for (size_t i = 0; i < total; i++) {
        const ckpt__out_tensor *t = ckpt__out_tensor_at(o, i);
        if (t->file == file)
            out[k++] = (ckpt__st_out_tensor){.name = t->name, .dtype = t->dtype, .ndim = t->ndim, .shape = t->shape,
                                             .nbytes = t->nbytes, .id = i};
    }
    /* The per-file entries, then (one file only) the checkpoint's own,
     * never overriding a per-file entry; then the checksum placeholder. */
    const ckpt__pairs *fm = ckpt__out_file_metadata(o), *cm = ckpt__out_checkpoint_metadata(o);
    ckpt__pairs meta = {0};
    ckpt_status st = CKPT_OK;
    /* values (a GGUF source's typed key-values) as their JSON text */
    for (size_t i = 0; st == CKPT_OK && i < fm->count; i++) {
        const char *text = ckpt__pairs_text(fm, i);
        if (!text || !ckpt__pairs_push(&meta, fm->keys[i], text)) st = ckpt__oom(err, NULL, NULL);
    }
    for (size_t i = 0; st == CKPT_OK && ckpt__out_file_count(o) == 1 && i < cm->count; i++) {
        if (ckpt__pairs_find(&meta, cm->keys[i]) >= 0) continue;
        const char *text = ckpt__pairs_text(cm, i);
        if (!text || !ckpt__pairs_push(&meta, cm->keys[i], text)) st = ckpt__oom(err, NULL, NULL);
    }
    char *placeholder = NULL, *chunks = NULL;
    bool failed = false;
    if (st == CKPT_OK && ckpt__out_options(o)->checksums) {
        placeholder = checksum_map(o, file, true); /* a fixed-length stand-in: the digests replace it at commit */
        chunks = chunk_map(o, file, true, &failed);
        if (!placeholder || failed || !ckpt__pairs_push(&meta, CKPT_CHECKSUM_METADATA_KEY, placeholder) ||
            (chunks && !ckpt__pairs_push(&meta, CKPT_CHUNK_METADATA_KEY, chunks)))
            st = ckpt__oom(err, NULL, NULL);
    }
    uint64_t data_size = 0;
    const char *path = ckpt__out_file_path(o, file);
    if (st == CKPT_OK && (st = ckpt__st_layout(out, n, meta.keys, meta.values, meta.count, head, &data_size))) {
        if (st == CKPT_E_LIMIT)
            st = ckpt__fail(err, st, path, NULL, -1, "the header would pass safetensors' limit of %llu bytes, which "
                            "safetensors refuses (write shards: fewer tensors per file)",
                            (unsigned long long)CKPT__ST_MAX_HEADER);
        else if (st == CKPT__D(SHAPE_OVERFLOW))
            st = ckpt__fail(err, st, path, NULL, -1, "the file's tensors hold more than 2^64 bytes");
        else
            st = ckpt__oom(err, path, "the header");
    }
    if (st == CKPT_OK && placeholder) st = locate_checksums(o, file, head, placeholder, err);
    st_file *sf = &state_of(o)->files[file];
    if (st == CKPT_OK && chunks) st = find_escaped(head, chunks, &sf->chunks_at, &sf->chunks_len, path, err);
    if (st == CKPT_OK && chunks) st = give_chunks(o, file, err);
    if (st == CKPT_OK) {
        for (size_t i = 0; i < n; i++) ckpt__out_tensor_at(o, out[i].id)->offset = head->len + out[i].begin;
        ckpt__out_set_file_size(o, file, head->len + data_size);
    }
    free(placeholder);
    free(chunks);
    ckpt__pairs_free(&meta);
    free(out);
    return st;
}

static int by_rank(const void *a, const void *b, void *rank) {
    size_t i = *(const size_t *)a, j = *(const size_t *)b, ri = ((size_t *)rank)[i], rj = ((size_t *)rank)[j];
    if (ri != rj) return ri < rj ? -1 : 1;
    return i < j ? -1 : i > j;
}

/* The index, as huggingface_hub writes it: the weight map shard by shard,
 * each shard's tensors in declaration order, then the tensors that joined
 * it for sharing a storage with one of them, storage by storage. */
static ckpt_status write_index(ckpt__output *o, ckpt_error *err) {
    size_t n = ckpt__out_count(o), listed = 0, followers = 0;
    const char **names = ckpt__malloc((n + 1) * sizeof *names), **files = ckpt__malloc((n + 1) * sizeof *files);
    size_t *rank = ckpt__malloc((n + 1) * sizeof *rank), *order = ckpt__malloc((n + 1) * sizeof *order),
           *list = ckpt__malloc((n + 1) * sizeof *list);
    ckpt_status st = !names || !files || !rank || !order || !list ? ckpt__oom(err, ckpt__out_path(o), NULL)
                                                                  : ckpt__out_storage_ranks(o, rank, true, err);
    for (size_t i = 0; st == CKPT_OK && i < n; i++) /* rank[i] ≤ i */
        if (ckpt__out_tensor_at(o, i)->file != CKPT__OUT_NONE && rank[i] != i) order[followers++] = i;
    if (st == CKPT_OK) qsort_r(order, followers, sizeof *order, by_rank, rank);
    for (size_t f = 0; st == CKPT_OK && f < ckpt__out_file_count(o); f++) {
        for (size_t i = 0; i < n; i++)
            if (ckpt__out_tensor_at(o, i)->file == f && rank[i] == i) list[listed++] = i;
        for (size_t k = 0; k < followers; k++)
            if (ckpt__out_tensor_at(o, order[k])->file == f) list[listed++] = order[k];
    }
    for (size_t k = 0; st == CKPT_OK && k < listed; k++) {
        const ckpt__out_tensor *t = ckpt__out_tensor_at(o, list[k]);
        names[k] = t->name;
        files[k] = ckpt__path_basename(ckpt__out_file_path(o, t->file));
    }
    ckpt__buf text = {0};
    if (st == CKPT_OK) {
        const ckpt__pairs *cm = ckpt__out_checkpoint_metadata(o);
        /* transformers' save_pretrained counts parameters, each storage once
         * (what is written), when asked. */
        uint64_t params = 0, numel;
        for (size_t i = 0; i < n; i++) {
            const ckpt__out_tensor *t = ckpt__out_tensor_at(o, i);
            if (t->file != CKPT__OUT_NONE && ckpt__shape_numel(t->ndim, t->shape, &numel)) params += numel;
        }
        ckpt__index_render(&text, ckpt__out_options(o)->total_parameters ? &params : NULL, state_of(o)->index_total,
                           cm->keys, cm->values, cm->count, names, files, listed);
        if (text.failed) st = ckpt__oom(err, ckpt__out_path(o), NULL);
    }
    char name[512];
    if (st == CKPT_OK && (size_t)snprintf(name, sizeof name, "%s.safetensors.index.json", ckpt__out_prefix(o)) >= sizeof name)
        st = ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, ckpt__out_path(o), NULL, -1, "prefix too long");
    if (st == CKPT_OK) st = ckpt__out_add_side_file(o, name, text.data, text.len, err);
    free(text.data);
    free(names);
    free(files);
    free(rank);
    free(order);
    free(list);
    return st;
}

/* A map's real text (malloc'ed; NULL: out of memory) over its placeholder
 * at `at`, of the same escaped length. */
static ckpt_status patch_map(ckpt__output *o, uint32_t file, char *map, uint64_t at, size_t len, ckpt_error *err) {
    ckpt__buf escaped = {0};
    if (map) ckpt__buf_json_string(&escaped, map);
    free(map);
    ckpt_status st = CKPT_OK;
    if (!map || escaped.failed) st = ckpt__oom(err, ckpt__out_file_path(o, file), NULL);
    else if (escaped.len != len)
        st = ckpt__fail(err, CKPT_E_BAD_STATE, ckpt__out_file_path(o, file), NULL, -1, "checksum map changed length");
    else st = ckpt__out_patch(o, file, at, escaped.data, escaped.len, err);
    free(escaped.data);
    return st;
}

static ckpt_status st_finish(ckpt__output *o, ckpt_error *err) {
    ckpt_status st = CKPT_OK;
    for (uint32_t f = 0; st == CKPT_OK && ckpt__out_options(o)->checksums && f < ckpt__out_file_count(o); f++) {
        /* The real maps over the placeholders. */
        st_file *sf = &state_of(o)->files[f];
        bool failed = false;
        st = patch_map(o, f, checksum_map(o, f, false), sf->checksum_at, sf->checksum_len, err);
        if (st == CKPT_OK && sf->chunks_len)
            st = patch_map(o, f, chunk_map(o, f, false, &failed), sf->chunks_at, sf->chunks_len, err);
    }
    if (st == CKPT_OK && ckpt__out_file_count(o) > 1) st = write_index(o, err);
    return st;
}

/* safetensors has no name for GGUF's block types. */
static ckpt_status st_accepts(const char *path, const char *name, ckpt_dtype dtype, uint32_t ndim,
                              const uint64_t *shape, ckpt_error *err) {
    (void)ndim, (void)shape;
    if (!ckpt_dtype_is_block(dtype)) return CKPT_OK;
    return ckpt__fail(err, CKPT__D(UNSUPPORTED_DTYPE), path, name, -1,
                      "safetensors has no %s type: dequantize it (a float dtype) or write GGUF", ckpt_dtype_name(dtype));
}

static const char *const st_suffixes[] = {".safetensors", NULL};

const ckpt__output_format ckpt__output_safetensors = {
    .name = "safetensors",
    .id = CKPT_FORMAT_SAFETENSORS,
    .suffixes = st_suffixes,
    /* One file; its parts and an index beside it (max_shard_size); or a
     * directory of Hugging Face shards. */
    .layouts = CKPT__LAYOUT_FILE | CKPT__LAYOUT_PARTS | CKPT__LAYOUT_DIR,
    .plan = st_plan,
    .layout = st_layout,
    .finish = st_finish,
    .owns = st_owns,
    .needs = st_needs,
    .dedup = true,
    .accepts = st_accepts,
};
