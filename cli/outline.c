/* outline.c — a checkpoint's object tree (ckpt_catalog_tree_json) as an
 * indented outline for people, with depth and width limits: what `ckpt
 * inspect` shows of a torch, DCP or Flax file's non-tensor structure
 * (--json gives the whole tree). */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

/* The longest string value shown whole; longer ones end in an ellipsis. */
enum { STRING_COLUMNS = 60, STACK_MAX = 64 };

typedef struct outline {
    FILE *out;
    const ckpt_catalog *cat;
    const ckpt__json_doc *doc;
    const ckpt__json_node *n;
    int depth, width;   /* limits: 0 for none */
    long lines, max_lines;
} outline;

/* A container being listed: its children from `next` (node index) on. */
typedef struct frame {
    size_t next, end; /* the next child (a value, or a [key, value] pair), and past the last */
    uint32_t index, count;
    int kind;         /* K_* below: how children are labelled */
} frame;

enum { K_LIST, K_DICT_PAIRS, K_OBJECT, K_CALL };

/* An object {"__name__": …} standing for a Python value (a dict, a
 * tuple, a tensor): the marker's value, else 0. */
static size_t marked(const ckpt__json_doc *d, size_t v, const char *marker) {
    return ckpt__json_member(d, (uint32_t)v, marker);
}

static void indent(outline *o, int level) {
    for (int i = 0; i < level; i++) fputs("  ", o->out);
}

/* A string as Python shows it, escaped for the terminal, cut at STRING_COLUMNS. */
static void print_string(outline *o, const char *s) {
    const char *p = printable(s);
    if (text_columns(p) <= STRING_COLUMNS) {
        fprintf(o->out, "'%s'", p);
        return;
    }
    int cols = 0;
    fputc('\'', o->out);
    for (; *p && cols < STRING_COLUMNS; cols++) {
        fputc(*p++, o->out);
        while (((unsigned char)*p & 0xC0) == 0x80) fputc(*p++, o->out);
    }
    fprintf(o->out, "%s' (%zu bytes)", ellipsis(), strlen(s));
}

/* A dict key: a string quoted, a number as it is, true/false as Python's. */
static void print_key(outline *o, size_t k) {
    const ckpt__json_node *n = o->n;
    if (n[k].kind == CKPT__JSON_STRING) print_string(o, n[k].str);
    else if (n[k].kind == CKPT__JSON_TRUE || n[k].kind == CKPT__JSON_FALSE) fputs(n[k].kind == CKPT__JSON_TRUE ? "True" : "False", o->out);
    else if (n[k].kind == CKPT__JSON_NUMBER) fwrite(n[k].str, 1, n[k].len, o->out);
    else fputs("?", o->out);
}

static void print_tensor(outline *o, const char *name) {
    const ckpt_tensor_info *t = ckpt_catalog_find(o->cat, name);
    fprintf(o->out, "tensor %s", printable(name));
    if (!t) return;
    fprintf(o->out, "  %s [", ckpt_dtype_name(t->dtype));
    for (uint32_t d = 0; d < t->ndim; d++) fprintf(o->out, d ? ", %" PRIu64 : "%" PRIu64, t->shape[d]);
    fputc(']', o->out);
}

/* Prints value v after its label; a container it would list returns its
 * frame in *f (true), a leaf or an empty container prints whole (false). */
static bool print_value(outline *o, size_t v, frame *f) {
    const ckpt__json_node *n = o->n;
    size_t m;
    const char *noun = NULL;
    *f = (frame){0};
    switch (n[v].kind) {
    case CKPT__JSON_NULL: fputs("None", o->out); return false;
    case CKPT__JSON_TRUE: fputs("True", o->out); return false;
    case CKPT__JSON_FALSE: fputs("False", o->out); return false;
    case CKPT__JSON_NUMBER: fwrite(n[v].str, 1, n[v].len, o->out); return false;
    case CKPT__JSON_STRING: print_string(o, n[v].str); return false;
    case CKPT__JSON_ARRAY: noun = "list", *f = (frame){v + 1, n[v].end, 0, n[v].count, K_LIST}; break;
    default: break;
    }
    if (!noun) {
        if ((m = marked(o->doc, v, "__tensor__")) && n[m].kind == CKPT__JSON_STRING) {
            print_tensor(o, n[m].str);
            return false;
        }
        if ((m = marked(o->doc, v, "__float__")) && n[m].kind == CKPT__JSON_STRING) {
            fputs(n[m].str, o->out); /* nan, inf, -inf */
            return false;
        }
        if ((m = marked(o->doc, v, "__global__")) && n[m].kind == CKPT__JSON_STRING) {
            fputs(printable(n[m].str), o->out);
            return false;
        }
        if (((m = marked(o->doc, v, "__bytes__")) || (m = marked(o->doc, v, "__int_le__"))) && n[m].kind == CKPT__JSON_STRING) {
            fprintf(o->out, "%s (%zu bytes)", marked(o->doc, v, "__bytes__") ? "bytes" : "int", (size_t)n[m].len / 2);
            return false;
        }
        /* an OrderedDict, a torch.Size: their class, which torch.load gives back */
        size_t cls = marked(o->doc, v, "__class__");
        const char *class_name = cls && n[cls].kind == CKPT__JSON_STRING ? n[cls].str : NULL;
        if ((m = marked(o->doc, v, "__dict__")) && n[m].kind == CKPT__JSON_ARRAY) noun = class_name && !strcmp(class_name, "collections.OrderedDict") ? "OrderedDict" : "dict", *f = (frame){m + 1, n[m].end, 0, n[m].count, K_DICT_PAIRS};
        else if ((m = marked(o->doc, v, "__tuple__")) && n[m].kind == CKPT__JSON_ARRAY) noun = class_name && !strcmp(class_name, "torch.Size") ? "torch.Size" : "tuple", *f = (frame){m + 1, n[m].end, 0, n[m].count, K_LIST};
        else if ((m = marked(o->doc, v, "__set__")) && n[m].kind == CKPT__JSON_ARRAY) noun = "set", *f = (frame){m + 1, n[m].end, 0, n[m].count, K_LIST};
        else if ((m = marked(o->doc, v, "__shards__")) && n[m].kind == CKPT__JSON_ARRAY) noun = "shards", *f = (frame){m + 1, n[m].end, 0, n[m].count, K_LIST};
        else if ((m = marked(o->doc, v, "__call__")) && n[m].kind == CKPT__JSON_STRING) {
            /* An allowed object: module.Name, then its args and state. */
            fprintf(o->out, "%s(%s)", printable(n[m].str), ellipsis());
            *f = (frame){v + 1, n[v].end, 0, n[v].count, K_CALL};
            return true;
        } else noun = "dict", *f = (frame){v + 1, n[v].end, 0, n[v].count, K_OBJECT};
    }
    uint32_t count = f->count;
    fprintf(o->out, "%s (%u %s)", noun, count,
            f->kind == K_DICT_PAIRS || f->kind == K_OBJECT ? (count == 1 ? "key" : "keys") : (count == 1 ? "item" : "items"));
    return count > 0;
}

/* Ends a line; false once the outline has printed its most lines. */
static bool end_line(outline *o) {
    fputc('\n', o->out);
    return !o->max_lines || ++o->lines < o->max_lines;
}

bool tree_is_state_dict(const ckpt_catalog *cat, const char *json) {
    char *text;
    ckpt__json_doc doc;
    size_t items = json_read(json, &text, &doc) ? ckpt__json_member(&doc, 0, "__dict__") : 0;
    const ckpt__json_node *n = doc.nodes;
    size_t count = ckpt_catalog_tensor_count(cat);
    bool flat = items && n[items].kind == CKPT__JSON_ARRAY && n[items].count == count;
    size_t pair = items + 1;
    for (size_t i = 0; flat && i < count; i++, pair = n[pair].end) {
        size_t v = n[pair].kind == CKPT__JSON_ARRAY && n[pair].count == 2 ? n[pair + 1].end : 0;
        size_t name = v ? marked(&doc, v, "__tensor__") : 0;
        flat = name && n[name].kind == CKPT__JSON_STRING && !strcmp(n[name].str, ckpt_catalog_tensor(cat, i)->name);
    }
    json_close(text, &doc);
    return flat;
}

void print_tree_outline(FILE *out, const ckpt_catalog *cat, const char *json, int depth, int width, long max_lines) {
    char *text;
    ckpt__json_doc doc;
    if (!json_read(json, &text, &doc)) {
        /* Deeper than the JSON reader goes (128 levels): its beginning as it is. */
        enum { SHOWN = 1500 };
        size_t len = strlen(json);
        fprintf(out, "  %.*s%s\n", (int)(len < SHOWN ? len : SHOWN), printable(json),
                len > SHOWN ? " … (ckpt inspect --json for all of it)" : "");
        json_close(text, &doc);
        return;
    }
    const ckpt__json_node *n = doc.nodes;
    outline o = {out, cat, &doc, n, depth, width, 0, max_lines};
    frame stack[STACK_MAX];
    int top = -1;
    frame f;
    indent(&o, 1);
    bool more = print_value(&o, 0, &f);
    bool room = end_line(&o);
    if (more && room) stack[++top] = f;
    while (top >= 0 && room) {
        frame *c = &stack[top];
        int level = top + 2;
        if (c->next >= c->end) {
            top--;
            continue;
        }
        if (o.width && c->index >= (uint32_t)o.width && c->kind != K_CALL) {
            indent(&o, level);
            fprintf(out, "%s %u more", ellipsis(), c->count - c->index);
            room = end_line(&o);
            top--;
            continue;
        }
        /* The child's label, then its value. */
        size_t value = c->next, key = 0;
        if (c->kind == K_DICT_PAIRS) { /* [key, value] */
            size_t pair = c->next;
            c->next = n[pair].end;
            bool ok = n[pair].kind == CKPT__JSON_ARRAY && n[pair].count == 2;
            key = ok ? pair + 1 : 0;
            value = ok ? n[pair + 1].end : 0;
        } else if (c->kind == K_OBJECT || c->kind == K_CALL) {
            key = c->next;
            value = n[key].end;
            c->next = n[value].end;
            if (c->kind == K_CALL && !strcmp(n[key].str, "__call__")) continue; /* its name, shown already */
        } else {
            c->next = n[value].end;
        }
        indent(&o, level);
        if (c->kind == K_LIST) fprintf(out, "[%u]", c->index);
        else if (c->kind == K_CALL) fputs(printable(n[key].str), out); /* args, state */
        else if (key) print_key(&o, key);
        c->index++;
        if (!value) {
            fputs("?", out);
            room = end_line(&o);
            continue;
        }
        fputs(": ", out);
        bool expand = print_value(&o, value, &f);
        room = end_line(&o);
        if (expand && room && (!o.depth || top + 1 < o.depth) && top + 1 < STACK_MAX) stack[++top] = f;
    }
    bool rest = false;
    for (int i = 0; i <= top; i++) rest |= stack[i].next < stack[i].end;
    if (!room && rest) {
        indent(&o, 1);
        fprintf(out, "%s (more: ckpt inspect --json, or --tree-depth/--tree-width)\n", ellipsis());
    }
    json_close(text, &doc);
}
