/* json.c — a small JSON reader for what the library hands the CLI as JSON
 * text (ckpt_convert_plan_preview's listing).  The CLI uses only the public
 * header, so it does not borrow the library's own reader. */
#include <stdlib.h>
#include <string.h>

#include "cli.h"

typedef struct reader {
    char *p;
    json_node *nodes;
    size_t count, cap;
} reader;

static void skip_space(reader *r) {
    while (*r->p == ' ' || *r->p == '\n' || *r->p == '\r' || *r->p == '\t') r->p++;
}

static size_t new_node(reader *r, int kind) {
    if (r->count == r->cap) {
        size_t cap = r->cap ? r->cap * 2 : 256;
        json_node *n = realloc(r->nodes, cap * sizeof *n);
        if (!n) return SIZE_MAX;
        r->nodes = n, r->cap = cap;
    }
    r->nodes[r->count] = (json_node){.kind = kind};
    return r->count++;
}

/* Four hex digits, or -1 (stopping at the first other character, the
 * text's NUL included). */
static int hex4(const char *s) {
    int v = 0;
    for (int i = 0; i < 4; i++) {
        char c = s[i];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0) return -1;
        v = v * 16 + d;
    }
    return v;
}

static char *put_utf8(char *o, unsigned cp) {
    if (cp < 0x80) *o++ = (char)cp;
    else if (cp < 0x800) *o++ = (char)(0xC0 | cp >> 6), *o++ = (char)(0x80 | (cp & 0x3F));
    else if (cp < 0x10000)
        *o++ = (char)(0xE0 | cp >> 12), *o++ = (char)(0x80 | (cp >> 6 & 0x3F)), *o++ = (char)(0x80 | (cp & 0x3F));
    else
        *o++ = (char)(0xF0 | cp >> 18), *o++ = (char)(0x80 | (cp >> 12 & 0x3F)), *o++ = (char)(0x80 | (cp >> 6 & 0x3F)),
        *o++ = (char)(0x80 | (cp & 0x3F));
    return o;
}

/* A string at r->p (after its '"'), decoded in place and NUL-terminated. */
static bool read_string(reader *r, size_t node) {
    char *out = r->p, *start = r->p;
    for (;;) {
        char c = *r->p++;
        if (c == '"') break;
        if (!c || (unsigned char)c < 0x20) return false;
        if (c != '\\') {
            *out++ = c;
            continue;
        }
        c = *r->p++;
        const char *simple = strchr("\"\\/bfnrt", c);
        if (c && simple) {
            *out++ = "\"\\/\b\f\n\r\t"[simple - "\"\\/bfnrt"];
            continue;
        }
        if (c != 'u') return false;
        int cp = hex4(r->p);
        if (cp < 0) return false;
        r->p += 4;
        if (cp >= 0xD800 && cp < 0xDC00 && r->p[0] == '\\' && r->p[1] == 'u') { /* a surrogate pair */
            int lo = hex4(r->p + 2);
            if (lo < 0xDC00 || lo >= 0xE000) return false;
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            r->p += 6;
        }
        out = put_utf8(out, (unsigned)cp);
    }
    *out = '\0';
    r->nodes[node].str = start;
    r->nodes[node].len = (size_t)(out - start);
    return true;
}

/* A scalar at r->p. */
static bool read_scalar(reader *r) {
    char c = *r->p;
    size_t node;
    bool ok = true;
    if (c == '"') {
        if ((node = new_node(r, JSON_STRING)) == SIZE_MAX) return false;
        r->p++;
        ok = read_string(r, node);
    } else if (!strncmp(r->p, "null", 4) || !strncmp(r->p, "true", 4) || !strncmp(r->p, "false", 5)) {
        if ((node = new_node(r, c == 'n' ? JSON_NULL : c == 't' ? JSON_TRUE : JSON_FALSE)) == SIZE_MAX) return false;
        r->p += c == 'f' ? 5 : 4;
    } else if (c == '-' || (c >= '0' && c <= '9')) {
        if ((node = new_node(r, JSON_NUMBER)) == SIZE_MAX) return false;
        char *start = r->p;
        while (*r->p && strchr("+-.0123456789eE", *r->p)) r->p++;
        r->nodes[node].str = start;
        r->nodes[node].len = (size_t)(r->p - start);
    } else {
        return false;
    }
    if (ok) r->nodes[node].end = (uint32_t)r->count;
    return ok;
}

/* An object member's key and ':' (its value follows). */
static bool read_key(reader *r) {
    skip_space(r);
    if (*r->p != '"') return false;
    r->p++;
    size_t key = new_node(r, JSON_STRING);
    if (key == SIZE_MAX || !read_string(r, key)) return false;
    r->nodes[key].end = (uint32_t)r->count;
    skip_space(r);
    return *r->p++ == ':';
}

/* The arrays and objects the reader is inside: their nodes (at most 64,
 * on the heap: the reader never recurses). */
typedef struct open_nodes {
    size_t node[64];
    int depth;
} open_nodes;

/* After a value: ',' and the next member, or closing brackets. *more: a
 * value follows. */
static bool after_value(reader *r, open_nodes *o, bool *more) {
    for (*more = false; o->depth; o->depth--) {
        json_node *n = &r->nodes[o->node[o->depth - 1]];
        n->count++;
        skip_space(r);
        char c = *r->p++;
        if (c == ',') return *more = true, n->kind != JSON_OBJECT || read_key(r);
        if (c != (n->kind == JSON_OBJECT ? '}' : ']')) return false;
        n->end = (uint32_t)r->count;
    }
    return true;
}

static bool read_value(reader *r) {
    open_nodes *o = calloc(1, sizeof *o);
    bool ok = o != NULL, more = true;
    while (ok && more) {
        skip_space(r);
        char c = *r->p;
        if (c != '{' && c != '[') {
            ok = read_scalar(r) && after_value(r, o, &more);
            continue;
        }
        size_t node;
        if (o->depth == 64 || (node = new_node(r, c == '{' ? JSON_OBJECT : JSON_ARRAY)) == SIZE_MAX) {
            ok = false;
            break;
        }
        r->p++;
        skip_space(r);
        if (*r->p == (c == '{' ? '}' : ']')) { /* empty */
            r->p++;
            r->nodes[node].end = (uint32_t)r->count;
            ok = after_value(r, o, &more);
            continue;
        }
        o->node[o->depth++] = node;
        ok = c != '{' || read_key(r);
    }
    free(o);
    return ok;
}

size_t json_parse(char *text, json_node **nodes) {
    reader r = {.p = text};
    bool ok = read_value(&r);
    skip_space(&r);
    /* Numbers end where their text does: NUL-terminated once nothing
     * follows them in place any more. */
    for (size_t i = 0; ok && i < r.count; i++)
        if (r.nodes[i].kind == JSON_NUMBER) r.nodes[i].str[r.nodes[i].len] = '\0';
    if (!ok || *r.p) {
        free(r.nodes);
        *nodes = NULL;
        return 0;
    }
    *nodes = r.nodes;
    return r.count;
}

size_t json_member(const json_node *n, size_t obj, const char *key) {
    if (n[obj].kind != JSON_OBJECT) return 0;
    size_t k = obj + 1;
    for (uint32_t m = 0; m < n[obj].count; m++) {
        if (!strcmp(n[k].str, key)) return n[k].end;
        k = n[n[k].end].end;
    }
    return 0; /* node 0 is the document: never a member */
}

bool json_u64(const json_node *n, uint64_t *out) {
    if (n->kind != JSON_NUMBER || n->str[0] < '0' || n->str[0] > '9') return false;
    char *end;
    *out = strtoull(n->str, &end, 10);
    return !*end;
}
