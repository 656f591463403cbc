/* value.c — the object tree's values (value.h): made in an arena, written
 * as JSON and read from it, each walk on a heap stack. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "value.h"

static bool has_pairs(ckpt__value_kind kind) { return kind == CKPT__V_DICT || kind == CKPT__V_OBJECT; }

size_t ckpt__value_cost(ckpt__value_kind kind, size_t count, size_t len) {
    size_t items = kind >= CKPT__V_LIST ? (has_pairs(kind) ? 2 * count : count) : 0;
    size_t text = kind >= CKPT__V_NUMBER && kind < CKPT__V_LIST ? ((len + 8) & ~(size_t)7) : 0;
    return sizeof(ckpt__value) + ((items * sizeof(ckpt__value *) + 7) & ~(size_t)7) + text;
}

ckpt__value *ckpt__value_new(ckpt__arena *a, ckpt__value_kind kind, size_t count) {
    if (count > UINT32_MAX) return NULL;
    ckpt__value *v = ckpt__arena_alloc(a, sizeof *v);
    if (!v) return NULL;
    *v = (ckpt__value){.kind = (uint8_t)kind, .count = (uint32_t)count};
    if (kind >= CKPT__V_LIST) {
        size_t n = has_pairs(kind) ? 2 * count : count;
        v->u.items = ckpt__arena_alloc(a, n ? n * sizeof *v->u.items : 1);
        if (!v->u.items) return NULL;
        memset(v->u.items, 0, n * sizeof *v->u.items);
    }
    return v;
}

ckpt__value *ckpt__value_text(ckpt__arena *a, ckpt__value_kind kind, const char *s, size_t len) {
    ckpt__value *v = ckpt__value_new(a, kind, 0);
    char *copy = v ? ckpt__arena_strndup(a, s, len) : NULL;
    if (!copy) return NULL;
    v->u.s.data = copy;
    v->u.s.len = len;
    return v;
}

ckpt__value *ckpt__value_member(const ckpt__value *v, const char *key) {
    if (v->kind != CKPT__V_OBJECT) return NULL;
    for (uint32_t i = 0; i < v->count; i++)
        if (!strcmp(ckpt__value_key(v, i)->u.s.data, key)) return ckpt__value_at(v, i);
    return NULL;
}

/* ---- writing JSON ----------------------------------------------------------- */

static void json_hex(ckpt__buf *b, const char *tag, const unsigned char *s, size_t n) {
    static const char hex[] = "0123456789abcdef";
    ckpt__buf_puts(b, "{\"");
    ckpt__buf_puts(b, tag);
    ckpt__buf_puts(b, "\": \"");
    for (size_t i = 0; i < n; i++) {
        char h[2] = {hex[s[i] >> 4], hex[s[i] & 15]};
        ckpt__buf_append(b, h, 2);
    }
    ckpt__buf_puts(b, "\"}");
}

static void json_tagged_string(ckpt__buf *b, const char *tag, const ckpt__value *v) {
    ckpt__buf_puts(b, "{\"");
    ckpt__buf_puts(b, tag);
    ckpt__buf_puts(b, "\": ");
    ckpt__buf_json_string_n(b, v->u.s.data, v->u.s.len);
    ckpt__buf_puts(b, "}");
}

/* A value with no items, whole; false for a container. */
static bool json_leaf(ckpt__buf *b, const ckpt__value *v) {
    char num[32];
    switch (v->kind) {
    case CKPT__V_NULL: ckpt__buf_puts(b, "null"); return true;
    case CKPT__V_BOOL: ckpt__buf_puts(b, v->u.b ? "true" : "false"); return true;
    case CKPT__V_INT: snprintf(num, sizeof num, "%lld", (long long)v->u.i), ckpt__buf_puts(b, num); return true;
    case CKPT__V_FLOAT: ckpt__buf_json_float(b, v->u.f); return true;
    case CKPT__V_NUMBER: ckpt__buf_append(b, v->u.s.data, v->u.s.len); return true;
    case CKPT__V_STR: ckpt__buf_json_string_n(b, v->u.s.data, v->u.s.len); return true;
    case CKPT__V_BYTES: json_hex(b, "__bytes__", (const unsigned char *)v->u.s.data, v->u.s.len); return true;
    case CKPT__V_BIGINT: json_hex(b, "__int_le__", (const unsigned char *)v->u.s.data, v->u.s.len); return true;
    case CKPT__V_TENSOR: json_tagged_string(b, "__tensor__", v); return true;
    case CKPT__V_GLOBAL: json_tagged_string(b, "__global__", v); return true;
    default: return false;
    }
}

/* The opening of a container, up to its first item. */
static void json_open(ckpt__buf *b, const ckpt__value *v) {
    if (v->cls && (v->kind == CKPT__V_TUPLE || v->kind == CKPT__V_DICT)) {
        ckpt__buf_puts(b, "{\"__class__\": ");
        ckpt__buf_json_string(b, v->cls);
        ckpt__buf_puts(b, ", ");
    } else if (v->kind != CKPT__V_LIST) {
        ckpt__buf_puts(b, "{");
    }
    switch (v->kind) {
    case CKPT__V_LIST: ckpt__buf_puts(b, "["); break;
    case CKPT__V_TUPLE: ckpt__buf_puts(b, "\"__tuple__\": ["); break;
    case CKPT__V_SET: ckpt__buf_puts(b, "\"__set__\": ["); break;
    case CKPT__V_DICT: ckpt__buf_puts(b, "\"__dict__\": ["); break;
    case CKPT__V_CALL:
        ckpt__buf_puts(b, "\"__call__\": ");
        ckpt__buf_json_string(b, v->cls);
        ckpt__buf_puts(b, ", \"args\": [");
        break;
    default: break; /* OBJECT: its members follow the brace */
    }
}

typedef struct wframe {
    const ckpt__value *v;
    uint32_t next;  /* the next item (pair) */
    bool in_state;  /* the state is being written: the closing brace is next */
} wframe;

/* Writes a leaf whole, or a container's opening with its frame pushed. */
static void json_enter(ckpt__buf *b, ckpt__stack *frames, const ckpt__value *v) {
    if (json_leaf(b, v)) return;
    json_open(b, v);
    wframe *f = ckpt__stack_push(frames);
    if (!f) {
        b->failed = true;
        return;
    }
    f->v = v;
}

/* One step of the top frame: its next item, its state, or its closing. */
static void json_step(ckpt__buf *b, ckpt__stack *frames) {
    wframe *f = ckpt__stack_top(frames);
    const ckpt__value *v = f->v;
    if (f->in_state) {
        ckpt__buf_puts(b, "}");
        ckpt__stack_pop(frames);
        return;
    }
    if (v->kind == CKPT__V_DICT && f->next) ckpt__buf_puts(b, "]");
    if (f->next < v->count) {
        uint32_t i = f->next++;
        if (i) ckpt__buf_puts(b, ", ");
        if (v->kind == CKPT__V_DICT) {
            ckpt__buf_puts(b, "[");
            json_leaf(b, ckpt__value_key(v, i)); /* keys are scalars */
            ckpt__buf_puts(b, ", ");
            json_enter(b, frames, ckpt__value_at(v, i));
        } else if (v->kind == CKPT__V_OBJECT) {
            const ckpt__value *key = ckpt__value_key(v, i);
            ckpt__buf_json_string_n(b, key->u.s.data, key->u.s.len);
            ckpt__buf_puts(b, ": ");
            json_enter(b, frames, ckpt__value_at(v, i));
        } else {
            json_enter(b, frames, v->u.items[i]);
        }
        return;
    }
    if (v->kind != CKPT__V_OBJECT) ckpt__buf_puts(b, "]");
    if (v->state && (v->kind == CKPT__V_DICT || v->kind == CKPT__V_CALL)) {
        ckpt__buf_puts(b, v->kind == CKPT__V_DICT ? ", \"__state__\": " : ", \"state\": ");
        f->in_state = true;
        json_enter(b, frames, v->state);
        return;
    }
    if (v->kind != CKPT__V_LIST) ckpt__buf_puts(b, "}");
    ckpt__stack_pop(frames);
}

void ckpt__value_json(ckpt__buf *b, const ckpt__value *v) {
    ckpt__stack frames = CKPT__STACK(wframe);
    json_enter(b, &frames, v);
    while (frames.len && !b->failed) json_step(b, &frames);
    ckpt__stack_free(&frames);
}

char *ckpt__value_json_text(const ckpt__value *v) {
    ckpt__buf b = {0};
    ckpt__value_json(&b, v);
    if (!b.failed && !b.data) ckpt__buf_puts(&b, "");
    if (b.failed) {
        free(b.data);
        return NULL;
    }
    return b.data;
}

/* ---- reading JSON ----------------------------------------------------------- */

typedef struct reader {
    ckpt__arena *arena;
    const ckpt__json_doc *doc;
    ckpt_error *err;
    const char *path;
    bool raw; /* CKPT__VALUE_RAW */
    ckpt_status st;
} reader;

static ckpt__value *charged(reader *r, ckpt__value *v, ckpt__value_kind kind, size_t count, size_t len) {
    if (!v) {
        r->st = ckpt__fail(r->err, CKPT_E_NO_MEMORY, r->path, NULL, -1, "out of memory for the object tree");
        return NULL;
    }
    r->st = ckpt__budget_charge(r->arena->budget, ckpt__value_cost(kind, count, len), r->err, r->path, -1);
    return r->st ? NULL : v;
}

static ckpt__value *make(reader *r, ckpt__value_kind kind, size_t count) {
    return charged(r, ckpt__value_new(r->arena, kind, count), kind, count, 0);
}

static ckpt__value *make_text(reader *r, ckpt__value_kind kind, const char *s, size_t len) {
    return charged(r, ckpt__value_text(r->arena, kind, s, len), kind, 0, len);
}

static const ckpt__json_node *node(const reader *r, uint32_t i) { return &r->doc->nodes[i]; }

/* Member m (0-based) of object node i: its key node, or 0. */
static uint32_t member_key(const reader *r, uint32_t i, uint32_t m) {
    if (m >= node(r, i)->count) return 0;
    uint32_t k = i + 1;
    while (m--) k = node(r, node(r, k)->end)->end;
    return k;
}

/* Whether object node i's member m is `key`, with a value of `kind`
 * (any kind: -1); *value its node. */
static bool has_member(const reader *r, uint32_t i, uint32_t m, const char *key, int kind, uint32_t *value) {
    uint32_t k = member_key(r, i, m);
    if (!k || strcmp(node(r, k)->str, key)) return false;
    *value = k + 1;
    return kind < 0 || node(r, k + 1)->kind == (uint32_t)kind;
}

/* A number as an INT or FLOAT when either writes it back as it is
 * written, else as its text. */
static ckpt__value *number(reader *r, const ckpt__json_node *n) {
    char *end;
    errno = 0;
    long long i = strtoll(n->str, &end, 10);
    char canonical[64];
    if (!errno && end == n->str + n->len) {
        snprintf(canonical, sizeof canonical, "%lld", i);
        if (strlen(canonical) == n->len && !memcmp(canonical, n->str, n->len)) {
            ckpt__value *v = make(r, CKPT__V_INT, 0);
            if (v) v->u.i = i;
            return v;
        }
    }
    double f = strtod(n->str, &end);
    if (end == n->str + n->len && isfinite(f)) {
        ckpt__buf b = {0};
        ckpt__buf_json_float(&b, f);
        bool same = !b.failed && b.len == n->len && !memcmp(b.data, n->str, n->len);
        free(b.data);
        if (same) {
            ckpt__value *v = make(r, CKPT__V_FLOAT, 0);
            if (v) v->u.f = f;
            return v;
        }
    }
    return make_text(r, CKPT__V_NUMBER, n->str, n->len);
}

static int hex_digit(char c) { return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1; }

/* {"__bytes__": hex} or {"__int_le__": hex} with lower-case hex, as it is written. */
static ckpt__value *hex_bytes(reader *r, ckpt__value_kind kind, const ckpt__json_node *hex) {
    if (hex->len % 2) return NULL;
    for (size_t i = 0; i < hex->len; i++)
        if (hex_digit(hex->str[i]) < 0) return NULL;
    ckpt__value *v = make_text(r, kind, "", 0);
    char *bytes = v ? ckpt__arena_alloc(r->arena, hex->len / 2 + 1) : NULL;
    if (v && !bytes) r->st = ckpt__fail(r->err, CKPT_E_NO_MEMORY, r->path, NULL, -1, "out of memory for the object tree");
    if (!bytes) return NULL;
    for (size_t i = 0; i < hex->len / 2; i++)
        bytes[i] = (char)(hex_digit(hex->str[2 * i]) << 4 | hex_digit(hex->str[2 * i + 1]));
    bytes[hex->len / 2] = '\0';
    v->u.s.data = bytes;
    v->u.s.len = hex->len / 2;
    r->st = ckpt__budget_charge(r->arena->budget, hex->len / 2, r->err, r->path, -1);
    return r->st ? NULL : v;
}

/* What a container's items are read from. */
typedef enum rpart { R_ELEMENTS, R_PAIRS, R_MEMBERS } rpart;

typedef struct rframe {
    ckpt__value *v;
    uint32_t next;  /* the node of the next item (R_PAIRS: the next [key, value]) */
    uint32_t done;  /* items (pairs) read */
    uint32_t state; /* the node of the state, read after the items, or 0 */
    uint8_t part;
} rframe;

static bool scalar_kind(uint32_t kind) { return kind != CKPT__JSON_ARRAY && kind != CKPT__JSON_OBJECT; }

/* Whether array node a holds [key, value] pairs with scalar keys. */
static bool pairs(const reader *r, uint32_t a) {
    for (uint32_t p = a + 1, m = 0; m < node(r, a)->count; m++, p = node(r, p)->end)
        if (node(r, p)->kind != CKPT__JSON_ARRAY || node(r, p)->count != 2 || !scalar_kind(node(r, p + 1)->kind))
            return false;
    return true;
}

/* The container an object of the schema is: its value, items to read
 * from node *items (an array), its state's node; NULL when it is none. */
static ckpt__value *schema_container(reader *r, uint32_t i, uint32_t *items, uint32_t *state, uint8_t *part) {
    const ckpt__json_node *n = node(r, i);
    uint32_t cls = 0, at = 0;
    ckpt__value_kind kind;
    if (has_member(r, i, 0, "__class__", CKPT__JSON_STRING, &cls)) at = 1;
    *state = 0;
    *part = R_ELEMENTS;
    if (has_member(r, i, at, "__tuple__", CKPT__JSON_ARRAY, items) && n->count == at + 1) {
        kind = CKPT__V_TUPLE;
    } else if (!at && has_member(r, i, 0, "__set__", CKPT__JSON_ARRAY, items) && n->count == 1) {
        kind = CKPT__V_SET;
    } else if (has_member(r, i, at, "__dict__", CKPT__JSON_ARRAY, items) && pairs(r, *items) &&
               (n->count == at + 1 || (n->count == at + 2 && has_member(r, i, at + 1, "__state__", -1, state)))) {
        kind = CKPT__V_DICT;
        *part = R_PAIRS;
    } else if (!at && has_member(r, i, 0, "__call__", CKPT__JSON_STRING, &cls) &&
               has_member(r, i, 1, "args", CKPT__JSON_ARRAY, items) &&
               (n->count == 2 || (n->count == 3 && has_member(r, i, 2, "state", -1, state)))) {
        kind = CKPT__V_CALL;
    } else {
        return NULL;
    }
    ckpt__value *v = make(r, kind, node(r, *items)->count);
    if (v && cls && !(v->cls = ckpt__arena_strndup(r->arena, node(r, cls)->str, node(r, cls)->len))) {
        r->st = ckpt__fail(r->err, CKPT_E_NO_MEMORY, r->path, NULL, -1, "out of memory for the object tree");
        return NULL;
    }
    return v;
}

/* An object of one string member that is a leaf of the schema, or NULL. */
static ckpt__value *schema_leaf(reader *r, uint32_t i) {
    uint32_t s;
    if (node(r, i)->count != 1) return NULL;
    const ckpt__json_node *text = node(r, i + 2);
    if (has_member(r, i, 0, "__tensor__", CKPT__JSON_STRING, &s))
        return make_text(r, CKPT__V_TENSOR, text->str, text->len);
    if (has_member(r, i, 0, "__global__", CKPT__JSON_STRING, &s))
        return make_text(r, CKPT__V_GLOBAL, text->str, text->len);
    if (has_member(r, i, 0, "__bytes__", CKPT__JSON_STRING, &s)) return hex_bytes(r, CKPT__V_BYTES, text);
    if (has_member(r, i, 0, "__int_le__", CKPT__JSON_STRING, &s)) return hex_bytes(r, CKPT__V_BIGINT, text);
    if (has_member(r, i, 0, "__float__", CKPT__JSON_STRING, &s)) {
        double f = !strcmp(text->str, "nan") ? NAN : !strcmp(text->str, "inf") ? INFINITY
                 : !strcmp(text->str, "-inf") ? -INFINITY : 0;
        ckpt__value *v = f != 0 || isnan(f) ? make(r, CKPT__V_FLOAT, 0) : NULL;
        if (v) v->u.f = f;
        return v;
    }
    return NULL;
}

/* The value of node i into *slot: a leaf whole, a container with its frame pushed. */
static void read_node(reader *r, ckpt__stack *frames, uint32_t i, ckpt__value **slot) {
    const ckpt__json_node *n = node(r, i);
    ckpt__value *v = NULL;
    uint32_t items = i, state = 0;
    uint8_t part = R_ELEMENTS;
    switch (n->kind) {
    case CKPT__JSON_NULL: v = make(r, CKPT__V_NULL, 0); break;
    case CKPT__JSON_TRUE:
    case CKPT__JSON_FALSE:
        if ((v = make(r, CKPT__V_BOOL, 0))) v->u.b = n->kind == CKPT__JSON_TRUE;
        break;
    case CKPT__JSON_NUMBER: v = r->raw ? make_text(r, CKPT__V_NUMBER, n->str, n->len) : number(r, n); break;
    case CKPT__JSON_STRING:
        if (!r->raw) v = make_text(r, CKPT__V_STR, n->str, n->len);
        else if ((v = make(r, CKPT__V_STR, 0))) v->u.s.data = n->str, v->u.s.len = n->len; /* the text's own */
        break;
    case CKPT__JSON_ARRAY: v = make(r, CKPT__V_LIST, n->count); break;
    default:
        if (!r->st && !(v = schema_leaf(r, i)) && !r->st && !(v = schema_container(r, i, &items, &state, &part)) &&
            !r->st) {
            v = make(r, CKPT__V_OBJECT, n->count);
            items = i;
            part = R_MEMBERS;
        }
    }
    if (!v) return;
    *slot = v;
    if (!ckpt__value_is_container(v)) return;
    rframe *f = ckpt__stack_push(frames);
    if (!f) {
        r->st = ckpt__fail(r->err, CKPT_E_NO_MEMORY, r->path, NULL, -1, "out of memory for the object tree");
        return;
    }
    *f = (rframe){.v = v, .next = items + 1, .state = state, .part = part};
}

static void read_step(reader *r, ckpt__stack *frames) {
    rframe *f = ckpt__stack_top(frames);
    ckpt__value *v = f->v;
    if (f->done == v->count) {
        uint32_t state = f->state;
        ckpt__stack_pop(frames);
        if (state) read_node(r, frames, state, &v->state);
        return;
    }
    uint32_t at = f->next, i = f->done++;
    if (f->part == R_ELEMENTS) {
        f->next = node(r, at)->end;
        read_node(r, frames, at, &v->u.items[i]);
        return;
    }
    /* R_PAIRS: [key, value]; R_MEMBERS: "key": value */
    uint32_t key = f->part == R_PAIRS ? at + 1 : at, value = node(r, key)->end;
    f->next = f->part == R_PAIRS ? node(r, at)->end : node(r, value)->end;
    read_node(r, frames, key, &v->u.items[2 * i]);
    if (!r->st) read_node(r, frames, value, &v->u.items[2 * i + 1]);
}

ckpt_status ckpt__value_from_doc(ckpt__arena *arena, const ckpt__json_doc *doc, ckpt__value_how how, ckpt__value **out,
                                 ckpt_error *err, const char *path) {
    reader r = {.arena = arena, .doc = doc, .err = err, .path = path, .raw = how == CKPT__VALUE_RAW};
    ckpt__stack frames = CKPT__STACK(rframe);
    *out = NULL;
    read_node(&r, &frames, 0, out);
    while (!r.st && frames.len) read_step(&r, &frames);
    ckpt__stack_free(&frames);
    return r.st;
}

ckpt_status ckpt__value_from_json(ckpt__arena *arena, const char *text, ckpt__value **out, ckpt_error *err,
                                  const char *path) {
    size_t len = strlen(text), at = 0;
    const char *why = NULL;
    char *copy = ckpt__malloc(len + 1);
    if (!copy) return ckpt__fail(err, CKPT_E_NO_MEMORY, path, NULL, -1, "out of memory for the object tree");
    memcpy(copy, text, len + 1);
    ckpt__json_doc doc;
    ckpt_status st = ckpt__json_parse_in(copy, len, arena->budget, &doc, &at, &why);
    if (st == CKPT_OK) {
        st = ckpt__value_from_doc(arena, &doc, CKPT__VALUE_AS_READ, out, err, path);
        ckpt__json_free(&doc);
    } else if (st == CKPT_E_NO_MEMORY) {
        ckpt__fail(err, st, path, NULL, -1, "out of memory for the object tree");
    } else if (st == CKPT_E_LIMIT) {
        ckpt__fail(err, st, path, NULL, -1, "the object tree would take more memory than its input allows");
    } else {
        ckpt__fail(err, st, path, NULL, (int64_t)at, "the object tree is not JSON ckpt reads (%s at its byte %zu)",
                   why ? why : "invalid", at);
    }
    free(copy);
    return st;
}

/* ---- the public accessors (ckpt.h) ------------------------------------------ */

_Static_assert(CKPT_VALUE_STRING == (int)CKPT__V_STR && CKPT_VALUE_OBJECT == (int)CKPT__V_OBJECT &&
                   CKPT_VALUE_NUMBER == (int)CKPT__V_NUMBER && CKPT_VALUE_LIST == (int)CKPT__V_LIST,
               "the public kinds are the values' kinds");

static bool has_text(const ckpt_value *v) { return v && v->kind >= CKPT__V_NUMBER && v->kind < CKPT__V_LIST; }
static bool has_items(const ckpt_value *v) { return v && v->kind >= CKPT__V_LIST && !has_pairs(v->kind); }

ckpt_value_kind ckpt_value_kind_of(const ckpt_value *v) { return v ? (ckpt_value_kind)v->kind : CKPT_VALUE_NULL; }
int ckpt_value_bool(const ckpt_value *v) { return v && v->kind == CKPT__V_BOOL && v->u.b; }
int64_t ckpt_value_int(const ckpt_value *v) { return v && v->kind == CKPT__V_INT ? v->u.i : 0; }
double ckpt_value_float(const ckpt_value *v) { return v && v->kind == CKPT__V_FLOAT ? v->u.f : 0.0; }

const char *ckpt_value_text(const ckpt_value *v, size_t *len) {
    if (len) *len = has_text(v) ? v->u.s.len : 0;
    return has_text(v) ? v->u.s.data : NULL;
}

size_t ckpt_value_len(const ckpt_value *v) { return v && ckpt__value_is_container(v) ? v->count : 0; }

const ckpt_value *ckpt_value_item(const ckpt_value *v, size_t i) {
    return has_items(v) && i < v->count ? v->u.items[i] : NULL;
}

const ckpt_value *ckpt_value_key(const ckpt_value *v, size_t i) {
    return v && has_pairs(v->kind) && i < v->count ? ckpt__value_key(v, i) : NULL;
}

const ckpt_value *ckpt_value_at(const ckpt_value *v, size_t i) {
    return v && has_pairs(v->kind) && i < v->count ? ckpt__value_at(v, i) : NULL;
}

const char *ckpt_value_class(const ckpt_value *v) {
    return v && (v->kind == CKPT__V_TUPLE || v->kind == CKPT__V_DICT || v->kind == CKPT__V_CALL) ? v->cls : NULL;
}

const ckpt_value *ckpt_value_state(const ckpt_value *v) {
    return v && (v->kind == CKPT__V_DICT || v->kind == CKPT__V_CALL) ? v->state : NULL;
}
