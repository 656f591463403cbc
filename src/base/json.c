/* json.c — see json.h. */
#include "json.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { MAX_DEPTH = 128 };

typedef struct parser {
    char *s; /* parsed in place: strings are decoded and NUL-terminated here */
    size_t len, pos;
    ckpt__json_node *nodes;
    size_t count, cap;
    ckpt__budget *budget;
    size_t charged; /* bytes of nodes charged to the budget */
    const char *why;
    ckpt_status failure; /* beyond "not JSON": out of memory, over the budget */
} parser;

static void skip_ws(parser *p) {
    while (p->pos < p->len) {
        char c = p->s[p->pos];
        if (c != ' ' && c != '\t' && c != '\n' && c != '\r') break;
        p->pos++;
    }
}

static bool grow_nodes(parser *p) {
    size_t cap = p->cap ? p->cap * 2 : 64;
    if (cap > UINT32_MAX) {
        p->why = "too many values";
        return false;
    }
    if (ckpt__budget_charge(p->budget, (cap - p->cap) * sizeof *p->nodes, NULL, NULL, -1)) {
        p->why = "its values would take more memory than the bound on metadata (8 times the input plus 64 MiB)";
        p->failure = CKPT_E_LIMIT;
        return false;
    }
    p->charged += (cap - p->cap) * sizeof *p->nodes;
    ckpt__json_node *n = ckpt__realloc(p->nodes, cap * sizeof *n);
    if (!n) {
        p->failure = CKPT_E_NO_MEMORY;
        return false;
    }
    p->nodes = n;
    p->cap = cap;
    return true;
}

static int64_t new_node(parser *p, ckpt__json_kind kind) {
    if (p->count == p->cap && !grow_nodes(p)) return -1;
    ckpt__json_node *n = &p->nodes[p->count];
    memset(n, 0, sizeof *n);
    n->kind = kind;
    n->offset = (uint32_t)p->pos;
    return (int64_t)p->count++;
}

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

static bool read_hex4(parser *p, unsigned *out) {
    if (p->len - p->pos < 4) return false;
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        int h = hexval(p->s[p->pos + i]);
        if (h < 0) return false;
        v = v * 16 + (unsigned)h;
    }
    p->pos += 4;
    *out = v;
    return true;
}

/* Eight bytes at a time: a mask whose lowest set bit marks the first byte
 * that is '"', '\\' or below 0x20 (bits above it may be spurious: the
 * subtraction borrows), or 0 when there is none. */
#define ONES 0x0101010101010101ULL
#define HIGHS 0x8080808080808080ULL
static inline uint64_t string_special_mask(uint64_t v) {
    uint64_t quote = v ^ (ONES * '"'), backslash = v ^ (ONES * '\\');
    return (((quote - ONES) & ~quote) | ((backslash - ONES) & ~backslash) | ((v - ONES * 0x20) & ~v)) & HIGHS;
}

static inline bool string_special_byte(unsigned char c) { return c == '"' || c == '\\' || c < 0x20; }

/* Advances to the first '"', '\\' or control byte of a string (or the end). */
static void skip_plain(parser *p) {
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    while (p->len - p->pos >= 8) {
        uint64_t v;
        memcpy(&v, p->s + p->pos, 8);
        uint64_t m = string_special_mask(v);
        if (m) {
            p->pos += (size_t)__builtin_ctzll(m) >> 3;
            return;
        }
        p->pos += 8;
    }
#endif
    while (p->pos < p->len && !string_special_byte((unsigned char)p->s[p->pos])) p->pos++;
}

/* Strings are decoded in place: a decoded string is never longer than its
 * source, and the closing quote becomes its NUL terminator. */
static bool parse_string(parser *p, ckpt__json_node *node) {
    p->pos++; /* opening quote */
    size_t start = p->pos;
    /* Fast path: no escapes — the string stays where it is. */
    skip_plain(p);
    if (p->pos >= p->len) {
        p->why = "unterminated string";
        return false;
    }
    unsigned char first = (unsigned char)p->s[p->pos];
    if (first == '"') {
        node->str = p->s + start;
        node->len = (uint32_t)(p->pos - start);
        p->s[p->pos++] = '\0';
        return true;
    }
    if (first < 0x20) {
        p->why = "control character in string";
        return false;
    }
    /* Escapes: decode from here on, writing behind the read position (six
     * source bytes, or twelve for a surrogate pair, become at most four). */
    size_t n = p->pos;
    char *out = p->s;
    while (p->pos < p->len) {
        unsigned char c = (unsigned char)p->s[p->pos];
        if (c == '"') {
            out[n] = '\0';
            p->pos++;
            node->str = p->s + start;
            node->len = (uint32_t)(n - start);
            return true;
        }
        if (c < 0x20) {
            p->why = "control character in string";
            return false;
        }
        if (c != '\\') {
            out[n++] = (char)c;
            p->pos++;
            continue;
        }
        p->pos++;
        if (p->pos >= p->len) break;
        char e = p->s[p->pos++];
        unsigned cp;
        switch (e) {
        case '"': out[n++] = '"'; continue;
        case '\\': out[n++] = '\\'; continue;
        case '/': out[n++] = '/'; continue;
        case 'b': out[n++] = '\b'; continue;
        case 'f': out[n++] = '\f'; continue;
        case 'n': out[n++] = '\n'; continue;
        case 'r': out[n++] = '\r'; continue;
        case 't': out[n++] = '\t'; continue;
        case 'u':
            if (!read_hex4(p, &cp)) {
                p->why = "invalid \\u escape";
                return false;
            }
            if (cp >= 0xDC00 && cp <= 0xDFFF) {
                p->why = "lone trailing surrogate in \\u escape";
                return false;
            }
            if (cp >= 0xD800 && cp <= 0xDBFF) {
                unsigned lo;
                if (p->len - p->pos < 6 || p->s[p->pos] != '\\' || p->s[p->pos + 1] != 'u') {
                    p->why = "lone leading surrogate in \\u escape";
                    return false;
                }
                p->pos += 2;
                if (!read_hex4(p, &lo) || lo < 0xDC00 || lo > 0xDFFF) {
                    p->why = "invalid surrogate pair in \\u escape";
                    return false;
                }
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            }
            if (cp < 0x80) {
                out[n++] = (char)cp;
            } else if (cp < 0x800) {
                out[n++] = (char)(0xC0 | (cp >> 6));
                out[n++] = (char)(0x80 | (cp & 0x3F));
            } else if (cp < 0x10000) {
                out[n++] = (char)(0xE0 | (cp >> 12));
                out[n++] = (char)(0x80 | ((cp >> 6) & 0x3F));
                out[n++] = (char)(0x80 | (cp & 0x3F));
            } else {
                out[n++] = (char)(0xF0 | (cp >> 18));
                out[n++] = (char)(0x80 | ((cp >> 12) & 0x3F));
                out[n++] = (char)(0x80 | ((cp >> 6) & 0x3F));
                out[n++] = (char)(0x80 | (cp & 0x3F));
            }
            continue;
        default:
            p->pos--;
            p->why = "invalid escape";
            return false;
        }
    }
    p->why = "unterminated string";
    return false;
}

static bool is_digit(char c) { return c >= '0' && c <= '9'; }

static bool parse_number(parser *p, ckpt__json_node *node) {
    size_t start = p->pos;
    if (p->s[p->pos] == '-') p->pos++;
    if (p->pos >= p->len || !is_digit(p->s[p->pos])) {
        p->why = "invalid number";
        return false;
    }
    if (p->s[p->pos] == '0') {
        p->pos++;
    } else {
        while (p->pos < p->len && is_digit(p->s[p->pos])) p->pos++;
    }
    if (p->pos < p->len && p->s[p->pos] == '.') {
        p->pos++;
        if (p->pos >= p->len || !is_digit(p->s[p->pos])) {
            p->why = "invalid number";
            return false;
        }
        while (p->pos < p->len && is_digit(p->s[p->pos])) p->pos++;
    }
    if (p->pos < p->len && (p->s[p->pos] == 'e' || p->s[p->pos] == 'E')) {
        p->pos++;
        if (p->pos < p->len && (p->s[p->pos] == '+' || p->s[p->pos] == '-')) p->pos++;
        if (p->pos >= p->len || !is_digit(p->s[p->pos])) {
            p->why = "invalid number";
            return false;
        }
        while (p->pos < p->len && is_digit(p->s[p->pos])) p->pos++;
    }
    node->str = p->s + start;
    node->len = (uint32_t)(p->pos - start);
    return true;
}

static bool literal(parser *p, const char *word) {
    size_t n = strlen(word);
    if (p->len - p->pos < n || memcmp(p->s + p->pos, word, n) != 0) {
        p->why = "invalid literal";
        return false;
    }
    p->pos += n;
    return true;
}

/* A scalar value at p->pos (not a container). */
static bool parse_scalar(parser *p, char c) {
    int64_t idx;
    bool ok;
    switch (c) {
    case '"':
        idx = new_node(p, CKPT__JSON_STRING);
        ok = idx >= 0 && parse_string(p, &p->nodes[idx]);
        break;
    case 't':
        idx = new_node(p, CKPT__JSON_TRUE);
        ok = idx >= 0 && literal(p, "true");
        break;
    case 'f':
        idx = new_node(p, CKPT__JSON_FALSE);
        ok = idx >= 0 && literal(p, "false");
        break;
    case 'n':
        idx = new_node(p, CKPT__JSON_NULL);
        ok = idx >= 0 && literal(p, "null");
        break;
    default:
        if (c != '-' && !is_digit(c)) {
            p->why = "unexpected character";
            return false;
        }
        idx = new_node(p, CKPT__JSON_NUMBER);
        ok = idx >= 0 && parse_number(p, &p->nodes[idx]);
    }
    if (ok) p->nodes[idx].end = (uint32_t)p->count;
    return ok;
}

/* An open array or object: its node and members so far. */
typedef struct open_container {
    uint32_t node;
    uint32_t count;
    bool object;
} open_container;

/* An object's key and its ':' (before each member's value). */
static bool parse_key(parser *p) {
    skip_ws(p);
    if (p->pos >= p->len || p->s[p->pos] != '"') {
        p->why = "expected a string key";
        return false;
    }
    int64_t key = new_node(p, CKPT__JSON_STRING);
    if (key < 0 || !parse_string(p, &p->nodes[key])) return false;
    p->nodes[key].end = (uint32_t)p->count;
    skip_ws(p);
    if (p->pos >= p->len || p->s[p->pos] != ':') {
        p->why = "expected ':'";
        return false;
    }
    p->pos++;
    return true;
}

/* After a value inside the innermost open container: ',' and the next
 * member's key, or the closing bracket, which completes the container (and
 * so a value of the one around it).  *more: a value follows. */
static bool after_value(parser *p, ckpt__stack *open, bool *more) {
    for (;;) {
        open_container *top = ckpt__stack_top(open);
        if (!top) {
            *more = false;
            return true;
        }
        if (top->count == (1u << 29) - 1) {
            p->why = "too many members";
            return false;
        }
        top->count++;
        skip_ws(p);
        if (p->pos < p->len && p->s[p->pos] == ',') {
            p->pos++;
            *more = true;
            return !top->object || parse_key(p);
        }
        if (p->pos < p->len && p->s[p->pos] == (top->object ? '}' : ']')) {
            p->pos++;
            p->nodes[top->node].count = top->count;
            p->nodes[top->node].end = (uint32_t)p->count;
            ckpt__stack_pop(open);
            continue;
        }
        p->why = top->object ? "expected ',' or '}'" : "expected ',' or ']'";
        return false;
    }
}

/* The document: each value in turn, the containers it is inside on a heap
 * stack (at most MAX_DEPTH of them). */
static bool parse_document(parser *p) {
    ckpt__stack open = CKPT__STACK(open_container);
    bool ok = true, more = true;
    while (ok && more) {
        skip_ws(p);
        if (p->pos >= p->len) {
            p->why = "unexpected end of input";
            ok = false;
            break;
        }
        char c = p->s[p->pos];
        if (c != '{' && c != '[') {
            ok = parse_scalar(p, c) && after_value(p, &open, &more);
            continue;
        }
        bool object = c == '{';
        int64_t self = new_node(p, object ? CKPT__JSON_OBJECT : CKPT__JSON_ARRAY);
        if (self < 0) {
            ok = false;
            break;
        }
        if (open.len >= MAX_DEPTH) {
            p->why = "nesting deeper than 128";
            ok = false;
            break;
        }
        p->pos++;
        skip_ws(p);
        if (p->pos < p->len && p->s[p->pos] == (object ? '}' : ']')) { /* empty */
            p->pos++;
            p->nodes[self].end = (uint32_t)p->count;
            ok = after_value(p, &open, &more);
            continue;
        }
        open_container *top = ckpt__stack_push(&open);
        if (!top) {
            p->failure = CKPT_E_NO_MEMORY;
            ok = false;
            break;
        }
        *top = (open_container){(uint32_t)self, 0, object};
        ok = !object || parse_key(p);
    }
    ckpt__stack_free(&open);
    return ok;
}

ckpt_status ckpt__json_parse_in(char *text, size_t len, ckpt__budget *budget, ckpt__json_doc *doc,
                                size_t *error_offset, const char **why) {
    parser p = {.s = text, .len = len, .budget = budget};
    bool ok = len <= UINT32_MAX;
    if (!ok) p.why = "longer than 4 GiB";
    if (ok) ok = parse_document(&p);
    if (ok) {
        skip_ws(&p);
        if (p.pos != p.len) {
            p.why = "trailing characters";
            ok = false;
        }
    }
    if (!ok) {
        free(p.nodes);
        ckpt__budget_release(budget, p.charged);
        memset(doc, 0, sizeof *doc);
        *error_offset = p.pos;
        *why = p.failure == CKPT_E_NO_MEMORY ? "out of memory" : p.why;
        return p.failure ? p.failure : CKPT_E_INVALID_ARGUMENT;
    }
    doc->nodes = p.nodes;
    doc->count = p.count;
    doc->budget = budget;
    doc->charged = p.charged;
    return CKPT_OK;
}

ckpt_status ckpt__json_parse(char *text, size_t len, ckpt__json_doc *doc, size_t *error_offset, const char **why) {
    return ckpt__json_parse_in(text, len, NULL, doc, error_offset, why);
}

void ckpt__json_free(ckpt__json_doc *doc) {
    free(doc->nodes);
    ckpt__budget_release(doc->budget, doc->charged);
    memset(doc, 0, sizeof *doc);
}

bool ckpt__json_u64(const ckpt__json_node *node, uint64_t *value) {
    if (node->kind != CKPT__JSON_NUMBER || node->len == 0) return false;
    uint64_t v = 0;
    for (size_t i = 0; i < node->len; i++) {
        char c = node->str[i];
        if (!is_digit(c)) return false;
        if (!ckpt__mul_u64(v, 10, &v) || !ckpt__add_u64(v, (uint64_t)(c - '0'), &v)) return false;
    }
    *value = v;
    return true;
}

uint32_t ckpt__json_member(const ckpt__json_doc *doc, uint32_t i, const char *key) {
    const ckpt__json_node *n = &doc->nodes[i];
    if (n->kind != CKPT__JSON_OBJECT) return 0;
    for (uint32_t k = 0, c = i + 1; k < n->count; k++, c = doc->nodes[c + 1].end)
        if (!strcmp(doc->nodes[c].str, key)) return c + 1;
    return 0;
}

/* ---- output ------------------------------------------------------------ */

static const char hex_lower[] = "0123456789abcdef";

static void buf_u_escape(ckpt__buf *b, unsigned v) {
    char e[6] = {'\\', 'u', hex_lower[(v >> 12) & 15], hex_lower[(v >> 8) & 15],
                 hex_lower[(v >> 4) & 15], hex_lower[v & 15]};
    ckpt__buf_append(b, e, 6);
}

static bool short_escape(ckpt__buf *b, unsigned char c) {
    const char *e = NULL;
    switch (c) {
    case '"': e = "\\\""; break;
    case '\\': e = "\\\\"; break;
    case '\b': e = "\\b"; break;
    case '\f': e = "\\f"; break;
    case '\n': e = "\\n"; break;
    case '\r': e = "\\r"; break;
    case '\t': e = "\\t"; break;
    default: return false;
    }
    ckpt__buf_append(b, e, 2);
    return true;
}

void ckpt__buf_json_string_n(ckpt__buf *b, const char *s, size_t len) {
    ckpt__buf_append(b, "\"", 1);
    size_t run = 0;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x20 && c != '"' && c != '\\') continue;
        ckpt__buf_append(b, s + run, i - run);
        if (!short_escape(b, c)) buf_u_escape(b, c);
        run = i + 1;
    }
    ckpt__buf_append(b, s + run, len - run);
    ckpt__buf_append(b, "\"", 1);
}

void ckpt__buf_json_string(ckpt__buf *b, const char *s) { ckpt__buf_json_string_n(b, s, strlen(s)); }

void ckpt__buf_json_float(ckpt__buf *b, double f) {
    char tmp[64];
    if (isnan(f)) ckpt__buf_puts(b, "{\"__float__\": \"nan\"}");
    else if (isinf(f)) ckpt__buf_puts(b, f > 0 ? "{\"__float__\": \"inf\"}" : "{\"__float__\": \"-inf\"}");
    else {
        ckpt__shortest_float(tmp, sizeof tmp - 2, f, false);
        if (!strpbrk(tmp, ".eE")) strcat(tmp, ".0"); /* 1.0, as Python's repr: a float, not an int */
        ckpt__buf_puts(b, tmp);
    }
}

void ckpt__buf_json_string_ascii(ckpt__buf *b, const char *str) {
    const unsigned char *s = (const unsigned char *)str;
    ckpt__buf_append(b, "\"", 1);
    while (*s) {
        unsigned char c = *s;
        if (c >= 0x20 && c < 0x7F && c != '"' && c != '\\') {
            ckpt__buf_append(b, (const char *)s, 1);
            s++;
            continue;
        }
        if (c < 0x80) {
            if (!short_escape(b, c)) buf_u_escape(b, c);
            s++;
            continue;
        }
        /* Decode one UTF-8 sequence (names were validated when read). */
        unsigned cp;
        size_t need;
        if (c >= 0xF0) cp = c & 0x07, need = 3;
        else if (c >= 0xE0) cp = c & 0x0F, need = 2;
        else cp = c & 0x1F, need = 1;
        s++;
        for (size_t k = 0; k < need && (*s & 0xC0) == 0x80; k++, s++) cp = (cp << 6) | (*s & 0x3F);
        if (cp >= 0x10000) {
            cp -= 0x10000;
            buf_u_escape(b, 0xD800 + (cp >> 10));
            buf_u_escape(b, 0xDC00 + (cp & 0x3FF));
        } else {
            buf_u_escape(b, cp);
        }
    }
    ckpt__buf_append(b, "\"", 1);
}

/* ---- pull reading -------------------------------------------------------- */

enum { PULL_VALUE, PULL_FIRST, PULL_AFTER, PULL_DONE, PULL_FAILED };

typedef struct pull_frame {
    bool object;
} pull_frame;

ckpt_status ckpt__json_pull_init(ckpt__json_pull *r, uint64_t size, size_t window, ckpt__json_fill fill, void *user) {
    memset(r, 0, sizeof *r);
    r->open = CKPT__STACK(pull_frame);
    r->size = size, r->fill = fill, r->user = user, r->state = PULL_VALUE;
    r->cap = window < 64 ? 64 : window;
    if (size > UINT32_MAX) {
        r->why = "longer than 4 GiB", r->state = PULL_FAILED;
        return CKPT_E_INVALID_ARGUMENT;
    }
    if (!(r->win = ckpt__malloc(r->cap + 1))) return CKPT_E_NO_MEMORY;
    return CKPT_OK;
}

void ckpt__json_pull_free(ckpt__json_pull *r) {
    free(r->win);
    free(r->key.data);
    ckpt__stack_free(&r->open);
    memset(r, 0, sizeof *r);
}

/* More of the document into the window, its bytes before `keep` dropped
 * (the window grows when nothing can be dropped): false at the document's
 * end, or on a failure (*st). */
static bool pull_more(ckpt__json_pull *r, size_t keep, ckpt_status *st) {
    *st = CKPT_OK;
    if (r->base + r->len >= r->size) return false;
    memmove(r->win, r->win + keep, r->len - keep);
    r->len -= keep, r->pos -= keep, r->base += keep;
    if (r->len == r->cap) {
        char *w = ckpt__realloc(r->win, r->cap * 2 + 1);
        if (!w) return (*st = CKPT_E_NO_MEMORY), false;
        r->win = w, r->cap *= 2;
    }
    uint64_t left = r->size - r->base - r->len;
    size_t want = r->cap - r->len < left ? r->cap - r->len : (size_t)left, got = 0;
    if ((*st = r->fill(r->user, r->base + r->len, r->win + r->len, want, &got))) return false;
    r->len += got;
    return got > 0; /* none: the document ended early (shrank) — its end */
}

static ckpt_status pull_fail(ckpt__json_pull *r, const char *why, size_t pos) {
    r->why = why, r->error_offset = r->base + pos, r->state = PULL_FAILED;
    return CKPT_E_INVALID_ARGUMENT;
}

/* Past whitespace, refilling: *end when the document ends first. */
static ckpt_status pull_ws(ckpt__json_pull *r, bool *end) {
    ckpt_status st;
    for (;;) {
        parser p = {.s = r->win, .len = r->len, .pos = r->pos};
        skip_ws(&p);
        r->pos = p.pos;
        if (r->pos < r->len) return (*end = false), CKPT_OK;
        if (!pull_more(r, r->pos, &st)) return (*end = true), st;
    }
}

static bool number_char(char c) { return is_digit(c) || c == '-' || c == '+' || c == '.' || c == 'e' || c == 'E'; }

/* The whole token at r->pos in the window: a string to its closing quote
 * (or a byte the string cannot hold), a number to its last character, a
 * literal's five bytes — or the document's end. */
static ckpt_status pull_token(ckpt__json_pull *r) {
    size_t i = 1; /* scanned, from the token's start */
    ckpt_status st;
    for (;;) {
        char c = r->win[r->pos];
        bool whole;
        if (c == '"') {
            for (;;) {
                parser p = {.s = r->win, .len = r->len, .pos = r->pos + i};
                skip_plain(&p);
                i = p.pos - r->pos;
                if (p.pos + 1 >= r->len || r->win[p.pos] != '\\') break;
                i += 2; /* an escape wholly in the window */
            }
            whole = r->pos + i < r->len && r->win[r->pos + i] != '\\';
        } else if (c == 't' || c == 'f' || c == 'n') {
            whole = r->len - r->pos >= 5;
        } else {
            while (r->pos + i < r->len && number_char(r->win[r->pos + i])) i++;
            whole = r->pos + i < r->len;
        }
        if (whole) return CKPT_OK;
        if (!pull_more(r, r->pos, &st)) return st; /* the end: the token's parser says what is missing */
    }
}

/* An object member's key and its ':' into r->key. */
static ckpt_status pull_key(ckpt__json_pull *r) {
    bool end;
    ckpt_status st = pull_ws(r, &end);
    if (st) return st;
    if (end || r->win[r->pos] != '"') return pull_fail(r, "expected a string key", r->pos);
    if ((st = pull_token(r))) return st;
    size_t start = r->pos;
    parser p = {.s = r->win, .len = r->len, .pos = r->pos};
    ckpt__json_node key;
    if (!parse_string(&p, &key)) return pull_fail(r, p.why, p.pos);
    r->pos = p.pos;
    r->key.len = 0;
    ckpt__buf_append(&r->key, key.str, key.len + 1);
    if (r->key.failed) return CKPT_E_NO_MEMORY;
    r->key_offset = r->base + start, r->have_key = true;
    if ((st = pull_ws(r, &end))) return st;
    if (end || r->win[r->pos] != ':') return pull_fail(r, "expected ':'", r->pos);
    r->pos++;
    return CKPT_OK;
}

/* A value at r->pos: a scalar whole, or an array or object opened. */
static ckpt_status pull_value(ckpt__json_pull *r, ckpt__json_event *ev) {
    bool end;
    ckpt_status st = pull_ws(r, &end);
    if (st) return st;
    if (end) return pull_fail(r, "unexpected end of input", r->pos);
    char c = r->win[r->pos];
    ev->step = CKPT__JSON_VALUE;
    ev->offset = r->base + r->pos;
    ev->depth = r->open.len;
    if (r->have_key) ev->key = r->key.data, ev->key_len = r->key.len - 1, ev->key_offset = r->key_offset;
    r->have_key = false;
    if (c == '{' || c == '[') {
        if (r->open.len >= MAX_DEPTH) return pull_fail(r, "nesting deeper than 128", r->pos);
        pull_frame *f = ckpt__stack_push(&r->open);
        if (!f) return CKPT_E_NO_MEMORY;
        f->object = c == '{';
        ev->kind = f->object ? CKPT__JSON_OBJECT : CKPT__JSON_ARRAY;
        r->pos++;
        r->state = PULL_FIRST;
        return CKPT_OK;
    }
    if ((st = pull_token(r))) return st;
    parser p = {.s = r->win, .len = r->len, .pos = r->pos};
    ckpt__json_node n = {0};
    bool ok;
    switch (c) {
    case '"': ok = parse_string(&p, &n), n.kind = CKPT__JSON_STRING; break;
    case 't': ok = literal(&p, "true"), n.kind = CKPT__JSON_TRUE; break;
    case 'f': ok = literal(&p, "false"), n.kind = CKPT__JSON_FALSE; break;
    case 'n': ok = literal(&p, "null"), n.kind = CKPT__JSON_NULL; break;
    default:
        if (c != '-' && !is_digit(c)) return pull_fail(r, "unexpected character", r->pos);
        ok = parse_number(&p, &n), n.kind = CKPT__JSON_NUMBER;
    }
    if (!ok) return pull_fail(r, p.why, p.pos);
    r->pos = p.pos;
    ev->kind = n.kind, ev->str = n.str, ev->len = n.len;
    r->state = PULL_AFTER;
    return CKPT_OK;
}

/* The innermost container closed at r->pos. */
static void pull_close(ckpt__json_pull *r, ckpt__json_event *ev, bool object) {
    ev->step = CKPT__JSON_END;
    ev->kind = object ? CKPT__JSON_OBJECT : CKPT__JSON_ARRAY;
    ev->offset = r->base + r->pos++;
    ckpt__stack_pop(&r->open);
    ev->depth = r->open.len;
    r->state = PULL_AFTER;
}

ckpt_status ckpt__json_pull_next(ckpt__json_pull *r, ckpt__json_event *ev) {
    memset(ev, 0, sizeof *ev);
    ckpt_status st;
    bool end;
    for (;;) {
        pull_frame *top = ckpt__stack_top(&r->open);
        switch (r->state) {
        case PULL_FAILED: return r->why ? CKPT_E_INVALID_ARGUMENT : CKPT_E_IO;
        case PULL_DONE: ev->step = CKPT__JSON_DONE; return CKPT_OK;
        case PULL_VALUE: return pull_value(r, ev);
        case PULL_FIRST:
            if ((st = pull_ws(r, &end))) return st;
            if (!end && r->win[r->pos] == (top->object ? '}' : ']')) {
                pull_close(r, ev, top->object);
                return CKPT_OK;
            }
            if (top->object && (st = pull_key(r))) return st;
            r->state = PULL_VALUE;
            continue;
        default: /* PULL_AFTER */
            if ((st = pull_ws(r, &end))) return st;
            if (!top) {
                if (!end) return pull_fail(r, "trailing characters", r->pos);
                r->state = PULL_DONE;
                continue;
            }
            if (!end && r->win[r->pos] == ',') {
                r->pos++;
                if (top->object && (st = pull_key(r))) return st;
                r->state = PULL_VALUE;
                continue;
            }
            if (!end && r->win[r->pos] == (top->object ? '}' : ']')) {
                pull_close(r, ev, top->object);
                return CKPT_OK;
            }
            return pull_fail(r, top->object ? "expected ',' or '}'" : "expected ',' or ']'", r->pos);
        }
    }
}

static bool is_open(const ckpt__json_event *ev) {
    return ev->step == CKPT__JSON_VALUE && (ev->kind == CKPT__JSON_ARRAY || ev->kind == CKPT__JSON_OBJECT);
}

ckpt_status ckpt__json_pull_skip(ckpt__json_pull *r, const ckpt__json_event *ev) {
    if (!is_open(ev)) return CKPT_OK;
    ckpt__json_event e;
    ckpt_status st;
    do {
        if ((st = ckpt__json_pull_next(r, &e))) return st;
    } while (!(e.step == CKPT__JSON_END && e.depth == ev->depth));
    return CKPT_OK;
}

/* An open container of a tree being read: its node, members so far, and
 * the key it is the value of. */
typedef struct build_frame {
    uint32_t node, count;
    const char *key;
} build_frame;

/* A node for event `ev` (str: its key when `key`), strings copied. */
static int64_t build_node(parser *b, ckpt__arena *strings, const ckpt__json_event *ev, bool key) {
    int64_t i = new_node(b, key ? CKPT__JSON_STRING : ev->kind);
    if (i < 0) return -1;
    ckpt__json_node *n = &b->nodes[i];
    const char *s = key ? ev->key : ev->str;
    size_t len = key ? ev->key_len : ev->len;
    n->offset = (uint32_t)(key ? ev->key_offset : ev->offset);
    n->end = (uint32_t)i + 1;
    if (key || ev->kind == CKPT__JSON_STRING || ev->kind == CKPT__JSON_NUMBER) {
        if (!(n->str = ckpt__arena_strndup(strings, s, len))) return b->failure = CKPT_E_NO_MEMORY, -1;
        n->len = (uint32_t)len;
    }
    return i;
}

ckpt_status ckpt__json_pull_doc(ckpt__json_pull *r, const ckpt__json_event *ev, ckpt__arena *strings,
                                ckpt__json_take take, void *user, ckpt__json_doc *doc) {
    parser b = {0};
    ckpt__stack frames = CKPT__STACK(build_frame);
    ckpt__json_event e = *ev;
    ckpt_status st = CKPT_OK;
    for (bool root = true;; root = false) {
        if (!root && (st = ckpt__json_pull_next(r, &e))) break;
        build_frame *top = ckpt__stack_top(&frames);
        if (e.step == CKPT__JSON_END) {
            b.nodes[top->node].count = top->count;
            b.nodes[top->node].end = (uint32_t)b.count;
            ckpt__stack_pop(&frames);
            if (!frames.len) break;
            continue;
        }
        if (top && top->count == (1u << 29) - 1) {
            st = pull_fail(r, "too many members", r->pos);
            break;
        }
        int64_t key = top && e.key ? build_node(&b, strings, &e, true) : 0;
        int64_t i = key >= 0 ? build_node(&b, strings, &e, false) : -1;
        if (i < 0) {
            st = b.failure ? b.failure : CKPT_E_NO_MEMORY;
            break;
        }
        if (top) top->count++;
        /* taken: read by the caller, an empty container (or the scalar) here */
        bool taken = !root && take && take(user, r, &e, top->key, &st);
        if (st) break;
        if (!is_open(&e) || taken) {
            if (root) break;
            continue;
        }
        build_frame *f = ckpt__stack_push(&frames);
        if (!f) {
            st = CKPT_E_NO_MEMORY;
            break;
        }
        *f = (build_frame){(uint32_t)i, 0, key > 0 ? b.nodes[key].str : NULL};
    }
    ckpt__stack_free(&frames);
    if (st) {
        free(b.nodes);
        memset(doc, 0, sizeof *doc);
        return st;
    }
    *doc = (ckpt__json_doc){.nodes = b.nodes, .count = b.count};
    return CKPT_OK;
}
