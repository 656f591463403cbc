/* pickle.c — see pickle.h. */
#include "pickle.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json.h" /* ckpt__utf8_check */

/* Bounds beyond what the input size already implies. */
enum { MAX_STACK = 1 << 24, MAX_MARKS = 1 << 20, MAX_MEMO = 1 << 26 };

typedef struct vm {
    const unsigned char *p;
    size_t len, pos, op_pos; /* op_pos: the current opcode's byte */
    const ckpt__pk_source *src;
    ckpt__pk_allow_fn allow;
    void *user;
    ckpt__arena *arena;
    ckpt_error *err;
    ckpt__pk_value **stack;
    size_t depth, stack_cap;
    size_t *marks;
    size_t nmarks, marks_cap;
    ckpt__pk_value **memo;
    size_t memo_cap, memo_next;
} vm;

static ckpt_status fail(vm *m, ckpt_status st, const char *fmt, ...) CKPT__PRINTF(3, 4);
static ckpt_status fail(vm *m, ckpt_status st, const char *fmt, ...) {
    char detail[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(detail, sizeof detail, fmt, ap);
    va_end(ap);
    return ckpt__fail(m->err, st, m->src->path, NULL, (int64_t)(m->src->file_offset + m->op_pos),
                      "%s%spickle byte %zu: %s", m->src->entry ? m->src->entry : "", m->src->entry ? ": " : "",
                      m->op_pos, detail);
}

static ckpt_status oom(vm *m) { return fail(m, CKPT_E_NO_MEMORY, "out of memory"); }

static ckpt__pk_value *new_value(vm *m, ckpt__pk_kind kind) {
    ckpt__pk_value *v = ckpt__arena_alloc(m->arena, sizeof *v);
    if (!v) return NULL;
    memset(v, 0, sizeof *v);
    v->kind = (uint8_t)kind;
    v->offset = m->op_pos;
    return v;
}

static ckpt_status push(vm *m, ckpt__pk_value *v) {
    if (!v) return oom(m);
    if (m->depth == m->stack_cap) {
        if (m->stack_cap >= MAX_STACK) return fail(m, CKPT_E_LIMIT, "stack deeper than %d", MAX_STACK);
        size_t cap = m->stack_cap ? m->stack_cap * 2 : 64;
        ckpt__pk_value **s = ckpt__realloc(m->stack, cap * sizeof *s);
        if (!s) return oom(m);
        m->stack = s;
        m->stack_cap = cap;
    }
    m->stack[m->depth++] = v;
    return CKPT_OK;
}

/* The values from stack position i on (NULL-safe: a pickle may build an
 * empty container before anything was ever pushed). */
static ckpt__pk_value **stack_at(vm *m, size_t i) { return m->stack ? m->stack + i : NULL; }

/* The bottom of the current frame: values above the last MARK. */
static size_t frame_base(const vm *m) { return m->nmarks ? m->marks[m->nmarks - 1] : 0; }

static ckpt_status pop(vm *m, ckpt__pk_value **out) {
    if (m->depth <= frame_base(m)) return fail(m, CKPT_E_PICKLE_INVALID, "stack underflow");
    *out = m->stack[--m->depth];
    return CKPT_OK;
}

static ckpt_status top(vm *m, ckpt__pk_value **out) {
    if (m->depth <= frame_base(m)) return fail(m, CKPT_E_PICKLE_INVALID, "stack underflow");
    *out = m->stack[m->depth - 1];
    return CKPT_OK;
}

/* Pops everything above the last MARK and the mark itself; the values are
 * m->stack[*first .. *first + *count). */
static ckpt_status pop_mark(vm *m, size_t *first, size_t *count) {
    if (!m->nmarks) return fail(m, CKPT_E_PICKLE_INVALID, "no MARK on the stack");
    size_t base = m->marks[--m->nmarks];
    *first = base;
    *count = m->depth - base;
    m->depth = base;
    return CKPT_OK;
}

static ckpt_status need(vm *m, size_t n) {
    if (m->len - m->pos < n)
        return fail(m, CKPT_E_PICKLE_INVALID, "truncated: %zu bytes needed, %zu left", n, m->len - m->pos);
    return CKPT_OK;
}

static uint64_t le(const unsigned char *p, int n) {
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

static ckpt_status seq_add(vm *m, ckpt__pk_value *seq, ckpt__pk_value *item) {
    if (seq->u.seq.count == seq->u.seq.cap) {
        size_t cap = seq->u.seq.cap ? seq->u.seq.cap * 2 : 4;
        ckpt__pk_value **items = ckpt__arena_alloc(m->arena, cap * sizeof *items);
        if (!items) return oom(m);
        if (seq->u.seq.count) memcpy(items, seq->u.seq.items, seq->u.seq.count * sizeof *items);
        seq->u.seq.items = items;
        seq->u.seq.cap = cap;
    }
    seq->u.seq.items[seq->u.seq.count++] = item;
    return CKPT_OK;
}

static ckpt_status make_seq(vm *m, ckpt__pk_kind kind, ckpt__pk_value *const *items, size_t n, ckpt__pk_value **out) {
    *out = NULL;
    ckpt__pk_value *v = new_value(m, kind);
    if (!v) return oom(m);
    for (size_t i = 0; i < n; i++) {
        ckpt_status st = seq_add(m, v, items[i]);
        if (st) return st;
    }
    *out = v;
    return CKPT_OK;
}

static ckpt_status string_value(vm *m, ckpt__pk_kind kind, size_t n) {
    ckpt_status st = need(m, n);
    if (st) return st;
    const char *s = (const char *)m->p + m->pos;
    if (kind == CKPT__PK_STR && ckpt__utf8_check((const unsigned char *)s, n) != n)
        return fail(m, CKPT_E_PICKLE_INVALID, "string is not valid UTF-8");
    ckpt__pk_value *v = new_value(m, kind);
    char *copy = v ? ckpt__arena_strndup(m->arena, s, n) : NULL;
    if (!copy) return oom(m);
    v->u.s.data = copy;
    v->u.s.len = n;
    m->pos += n;
    return push(m, v);
}

static ckpt_status memo_put(vm *m, uint64_t index) {
    ckpt__pk_value *v = NULL;
    ckpt_status st = top(m, &v);
    if (st) return st;
    /* Picklers number memo entries 0, 1, 2, …; bound sparse indexes by the
     * input size so that a huge index cannot allocate a huge table. */
    if (index >= MAX_MEMO || index > 2 * (uint64_t)m->len + 16)
        return fail(m, CKPT_E_LIMIT, "memo index %llu is beyond the limit", (unsigned long long)index);
    if (index >= m->memo_cap) {
        size_t cap = m->memo_cap ? m->memo_cap : 64;
        while (cap <= index) cap *= 2;
        ckpt__pk_value **memo = ckpt__realloc(m->memo, cap * sizeof *memo);
        if (!memo) return oom(m);
        memset(memo + m->memo_cap, 0, (cap - m->memo_cap) * sizeof *memo);
        m->memo = memo;
        m->memo_cap = cap;
    }
    m->memo[index] = v;
    if (index >= m->memo_next) m->memo_next = (size_t)index + 1;
    return CKPT_OK;
}

static ckpt_status memo_get(vm *m, uint64_t index) {
    if (index >= m->memo_cap || !m->memo[index])
        return fail(m, CKPT_E_PICKLE_INVALID, "memo index %llu was never stored", (unsigned long long)index);
    return push(m, m->memo[index]);
}

static ckpt_status global(vm *m, const char *module, size_t mlen, const char *name, size_t nlen) {
    ckpt__pk_value *v = new_value(m, CKPT__PK_GLOBAL);
    if (!v) return oom(m);
    char *mod = ckpt__arena_strndup(m->arena, module, mlen), *nm = ckpt__arena_strndup(m->arena, name, nlen);
    if (!mod || !nm) return oom(m);
    if (strlen(mod) != mlen || strlen(nm) != nlen) return fail(m, CKPT_E_PICKLE_INVALID, "global name contains a NUL");
    /* Python 2 module names, as CPython's _compat_pickle and torch's
     * weights-only unpickler map them (protocol 2 writes them). */
    if (!strcmp(mod, "__builtin__")) mod = "builtins";
    else if (!strcmp(mod, "copy_reg")) mod = "copyreg";
    ckpt__pk_allowed allowed = m->allow ? m->allow(mod, nm, m->user) : CKPT__PK_DENY;
    if (allowed == CKPT__PK_DENY)
        return fail(m, CKPT_E_PICKLE_FORBIDDEN,
                    "global '%s.%s' is not allowed (nothing was executed); if it only rebuilds plain data (a numpy "
                    "scalar, an argparse.Namespace, a dataclass), allow it with --allow-global %s.%s (Python: "
                    "allowed_globals=[\"%s.%s\"]; C: ckpt_catalog_options.allowed_globals)",
                    mod, nm, mod, nm, mod, nm);
    v->u.global.module = mod; /* arena or a literal: both outlive the tree */
    v->u.global.name = nm;
    v->u.global.state_only = allowed == CKPT__PK_ALLOW_STATE;
    return push(m, v);
}

static ckpt_status text_global(vm *m) {
    const char *s = (const char *)m->p + m->pos;
    const char *nl1 = memchr(s, '\n', m->len - m->pos);
    if (!nl1) return fail(m, CKPT_E_PICKLE_INVALID, "GLOBAL without a newline");
    const char *name = nl1 + 1;
    const char *nl2 = memchr(name, '\n', (size_t)((const char *)m->p + m->len - name));
    if (!nl2) return fail(m, CKPT_E_PICKLE_INVALID, "GLOBAL without a second newline");
    m->pos = (size_t)(nl2 + 1 - (const char *)m->p);
    return global(m, s, (size_t)(nl1 - s), name, (size_t)(nl2 - name));
}

bool ckpt__pk_is_global(const ckpt__pk_value *v, const char *module, const char *name) {
    return v && v->kind == CKPT__PK_GLOBAL && !strcmp(v->u.global.module, module) && !strcmp(v->u.global.name, name);
}

/* Reconstructors that build plain data from plain data, callable with
 * REDUCE when a caller allows them. */
static bool plain_data(const ckpt__pk_value *g) {
    static const char *const names[][2] = {
        {"numpy.core.multiarray", "scalar"}, {"numpy._core.multiarray", "scalar"}, {"numpy", "dtype"},
    };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (ckpt__pk_is_global(g, names[i][0], names[i][1])) return true;
    return false;
}

/* numpy's scalar(dtype, bytes) for the common dtypes: the number itself
 * (NULL otherwise: it stays a call in the tree). */
static ckpt__pk_value *numpy_scalar(vm *m, const ckpt__pk_value *f, ckpt__pk_value **a, size_t n) {
    if (strcmp(f->u.global.name, "scalar") || n != 2 || a[1]->kind != CKPT__PK_BYTES) return NULL;
    const ckpt__pk_value *dt = a[0];
    /* numpy.dtype(("f8", False, True)) with BUILD state (3, "<", …) */
    if (dt->kind != CKPT__PK_CALL || !ckpt__pk_is_global(dt->u.call.callable, "numpy", "dtype") ||
        dt->u.call.args->u.seq.count < 1 || dt->u.call.args->u.seq.items[0]->kind != CKPT__PK_STR)
        return NULL;
    const char *code = dt->u.call.args->u.seq.items[0]->u.s.data;
    bool big = dt->state && dt->state->kind == CKPT__PK_TUPLE && dt->state->u.seq.count > 1 &&
               dt->state->u.seq.items[1]->kind == CKPT__PK_STR && !strcmp(dt->state->u.seq.items[1]->u.s.data, ">");
    const unsigned char *b = (const unsigned char *)a[1]->u.s.data;
    size_t len = a[1]->u.s.len;
    unsigned char le[8] = {0};
    if (len > 8 || len == 0) return NULL;
    for (size_t i = 0; i < len; i++) le[i] = big ? b[len - 1 - i] : b[i];
    uint64_t u = 0;
    for (size_t i = len; i-- > 0;) u = u << 8 | le[i];
    ckpt__pk_value *v = NULL;
    char kind = code[0];
    unsigned width = (unsigned)(code[1] - '0');
    if (!code[1] || code[2] || width != len) return NULL;
    if (kind == 'f' && (len == 4 || len == 8)) {
        v = new_value(m, CKPT__PK_FLOAT);
        if (v && len == 8) memcpy(&v->u.f, &u, 8);
        if (v && len == 4) {
            float single;
            uint32_t w = (uint32_t)u;
            memcpy(&single, &w, 4);
            v->u.f = single;
        }
    } else if (kind == 'i' || kind == 'u') {
        if (kind == 'u' && len == 8 && (u >> 63)) return NULL; /* beyond int64: keep the call */
        v = new_value(m, CKPT__PK_INT);
        if (v) v->u.i = kind == 'i' && len < 8 && (u >> (8 * len - 1)) ? (int64_t)(u | (~0ULL << (8 * len))) : (int64_t)u;
    } else if (kind == 'b' && len == 1) {
        v = new_value(m, CKPT__PK_BOOL);
        if (v) v->u.b = u != 0;
    }
    return v;
}

/* REDUCE and NEWOBJ on an allowed global: understood container
 * constructors become containers, the rest a CALL node. */
static ckpt_status apply(vm *m, ckpt__pk_value *callable, ckpt__pk_value *args, ckpt__pk_value *kwargs, bool newobj) {
    if (!callable || callable->kind != CKPT__PK_GLOBAL)
        return fail(m, CKPT_E_PICKLE_FORBIDDEN, "%s on something that is not an allowed global",
                    newobj ? "NEWOBJ" : "REDUCE");
    if (!args || args->kind != CKPT__PK_TUPLE)
        return fail(m, CKPT_E_PICKLE_INVALID, "arguments of %s.%s are not a tuple", callable->u.global.module,
                    callable->u.global.name);
    size_t n = args->u.seq.count;
    ckpt__pk_value **a = args->u.seq.items;
    ckpt__pk_value *v = NULL;
    if (callable->u.global.state_only && !newobj) {
        /* A caller's allowed global only rebuilds objects from their state
         * (NEWOBJ, then BUILD), or is a plain-data reconstructor. */
        if (!plain_data(callable))
            return fail(m, CKPT_E_PICKLE_FORBIDDEN,
                        "REDUCE of the allowed global %s.%s calls it with arguments; an allowed global only rebuilds "
                        "an object from its state (nothing was executed)",
                        callable->u.global.module, callable->u.global.name);
        if ((v = numpy_scalar(m, callable, a, n))) return push(m, v);
    }
    if (!kwargs && ckpt__pk_is_global(callable, "collections", "OrderedDict") && n == 0) {
        v = new_value(m, CKPT__PK_DICT);
    } else if (!kwargs && (ckpt__pk_is_global(callable, "builtins", "set") ||
                           ckpt__pk_is_global(callable, "builtins", "frozenset")) && n <= 1 &&
               (n == 0 || a[0]->kind == CKPT__PK_LIST || a[0]->kind == CKPT__PK_TUPLE)) {
        ckpt_status st = make_seq(m, CKPT__PK_SET, n ? a[0]->u.seq.items : NULL, n ? a[0]->u.seq.count : 0, &v);
        if (st) return st;
    } else if (!kwargs && ckpt__pk_is_global(callable, "torch", "Size") && n == 1 && a[0]->kind == CKPT__PK_TUPLE) {
        v = a[0];
    } else if (!kwargs && ckpt__pk_is_global(callable, "_codecs", "encode") && n == 2 && a[0]->kind == CKPT__PK_STR &&
               a[1]->kind == CKPT__PK_STR && !strcmp(a[1]->u.s.data, "latin1")) {
        /* How protocol 2 pickles bytes: code points below 256, one byte each. */
        const unsigned char *s = (const unsigned char *)a[0]->u.s.data;
        unsigned char *out = ckpt__arena_alloc(m->arena, a[0]->u.s.len + 1);
        if (!out) return oom(m);
        size_t k = 0;
        for (size_t i = 0; i < a[0]->u.s.len; i++) {
            if (s[i] < 0x80) out[k++] = s[i];
            else if ((s[i] == 0xC2 || s[i] == 0xC3) && i + 1 < a[0]->u.s.len)
                out[k++] = (unsigned char)(((s[i] & 0x03) << 6) | (s[i + 1] & 0x3F)), i++;
            else return fail(m, CKPT_E_PICKLE_INVALID, "latin1 encode of a character above U+00FF");
        }
        v = new_value(m, CKPT__PK_BYTES);
        if (v) v->u.s.data = (const char *)out, v->u.s.len = k;
    } else if (!kwargs && ckpt__pk_is_global(callable, "builtins", "bytearray") && n == 1 &&
               a[0]->kind == CKPT__PK_BYTES) {
        v = a[0];
    } else {
        v = new_value(m, CKPT__PK_CALL);
        if (v) {
            v->newobj = newobj;
            v->u.call.callable = callable;
            v->u.call.args = args;
            v->u.call.kwargs = kwargs;
        }
    }
    return push(m, v);
}

static ckpt_status op_build(vm *m) {
    ckpt__pk_value *state = NULL, *inst = NULL;
    ckpt_status st = pop(m, &state);
    if (st == CKPT_OK) st = top(m, &inst);
    if (st) return st;
    if (inst->kind != CKPT__PK_CALL && inst->kind != CKPT__PK_DICT)
        return fail(m, CKPT_E_PICKLE_FORBIDDEN, "BUILD on something that no allowed global made");
    inst->state = state;
    return CKPT_OK;
}

static ckpt_status op_setitems(vm *m, size_t first, size_t count) {
    ckpt__pk_value *dict = NULL;
    ckpt_status st = top(m, &dict);
    if (st) return st;
    if (dict->kind != CKPT__PK_DICT) return fail(m, CKPT_E_PICKLE_INVALID, "SETITEM on something that is not a dict");
    if (count % 2) return fail(m, CKPT_E_PICKLE_INVALID, "SETITEMS with an odd number of values");
    for (size_t i = 0; i < count && st == CKPT_OK; i++) st = seq_add(m, dict, m->stack[first + i]);
    return st;
}

static ckpt_status op_appends(vm *m, size_t first, size_t count, ckpt__pk_kind want) {
    ckpt__pk_value *seq = NULL;
    ckpt_status st = top(m, &seq);
    if (st) return st;
    if (seq->kind != want)
        return fail(m, CKPT_E_PICKLE_INVALID, "%s on something that is not a %s", want == CKPT__PK_SET ? "ADDITEMS" : "APPEND",
                    want == CKPT__PK_SET ? "set" : "list");
    for (size_t i = 0; i < count && st == CKPT_OK; i++) st = seq_add(m, seq, m->stack[first + i]);
    return st;
}

static ckpt_status step(vm *m, bool *stop) {
    m->op_pos = m->pos;
    ckpt_status st = need(m, 1);
    if (st) return st;
    unsigned char op = m->p[m->pos++];
    ckpt__pk_value *v = NULL, *w = NULL, *x = NULL;
    size_t first = 0, count = 0;
    uint64_t n;
    switch (op) {
    case 0x80: /* PROTO */
        if ((st = need(m, 1))) return st;
        if (m->p[m->pos] > 5) return fail(m, CKPT_E_PICKLE_INVALID, "unknown protocol %u", m->p[m->pos]);
        m->pos++;
        return CKPT_OK;
    case 0x95: /* FRAME: a length prefix; the bytes follow inline */
        if ((st = need(m, 8))) return st;
        n = le(m->p + m->pos, 8);
        m->pos += 8;
        if (n > m->len - m->pos) return fail(m, CKPT_E_PICKLE_INVALID, "frame of %llu bytes runs past the end", (unsigned long long)n);
        return CKPT_OK;
    case '.': /* STOP */
        *stop = true;
        return CKPT_OK;
    case '(': /* MARK */
        if (m->nmarks == m->marks_cap) {
            if (m->marks_cap >= MAX_MARKS) return fail(m, CKPT_E_LIMIT, "more than %d nested MARKs", MAX_MARKS);
            size_t cap = m->marks_cap ? m->marks_cap * 2 : 16;
            size_t *mk = ckpt__realloc(m->marks, cap * sizeof *mk);
            if (!mk) return oom(m);
            m->marks = mk;
            m->marks_cap = cap;
        }
        m->marks[m->nmarks++] = m->depth;
        return CKPT_OK;
    case '0': /* POP */
        if (m->depth == frame_base(m) && m->nmarks) return pop_mark(m, &first, &count);
        return pop(m, &v);
    case '1': /* POP_MARK */
        return pop_mark(m, &first, &count);
    case '2': /* DUP */
        if ((st = top(m, &v))) return st;
        return push(m, v);
    case 'N': return push(m, new_value(m, CKPT__PK_NONE));
    case 0x88: /* NEWTRUE */
    case 0x89: /* NEWFALSE */
        v = new_value(m, CKPT__PK_BOOL);
        if (v) v->u.b = op == 0x88;
        return push(m, v);
    case 'J': /* BININT */
    case 'K': /* BININT1 */
    case 'M': /* BININT2 */
        count = op == 'J' ? 4 : op == 'K' ? 1 : 2;
        if ((st = need(m, count))) return st;
        v = new_value(m, CKPT__PK_INT);
        if (v) v->u.i = op == 'J' ? (int64_t)(int32_t)(uint32_t)le(m->p + m->pos, 4) : (int64_t)le(m->p + m->pos, (int)count);
        m->pos += count;
        return push(m, v);
    case 0x8a: /* LONG1 */
    case 0x8b: /* LONG4 */
        if ((st = need(m, op == 0x8a ? 1 : 4))) return st;
        n = le(m->p + m->pos, op == 0x8a ? 1 : 4);
        m->pos += op == 0x8a ? 1 : 4;
        if ((st = need(m, n))) return st;
        if (n <= 8) {
            uint64_t u = le(m->p + m->pos, (int)n);
            if (n && n < 8 && (m->p[m->pos + n - 1] & 0x80)) u |= ~0ULL << (8 * n); /* sign-extend */
            v = new_value(m, CKPT__PK_INT);
            if (v) v->u.i = (int64_t)u;
            m->pos += n;
            return push(m, v);
        }
        return string_value(m, CKPT__PK_BIGINT, n);
    case 'G': /* BINFLOAT: big-endian double */
        if ((st = need(m, 8))) return st;
        v = new_value(m, CKPT__PK_FLOAT);
        if (v) {
            uint64_t bits = 0;
            for (int i = 0; i < 8; i++) bits = bits << 8 | m->p[m->pos + i];
            memcpy(&v->u.f, &bits, 8);
        }
        m->pos += 8;
        return push(m, v);
    case 'X': /* BINUNICODE */
    case 0x8c: /* SHORT_BINUNICODE */
    case 0x8d: /* BINUNICODE8 */
    case 'B': /* BINBYTES */
    case 'C': /* SHORT_BINBYTES */
    case 0x8e: /* BINBYTES8 */
    case 0x96: /* BYTEARRAY8 */
    case 'T': /* BINSTRING (python 2 str) */
    case 'U': /* SHORT_BINSTRING */
        count = (op == 0x8c || op == 'C' || op == 'U') ? 1 : (op == 0x8d || op == 0x8e || op == 0x96) ? 8 : 4;
        if ((st = need(m, count))) return st;
        n = le(m->p + m->pos, (int)count);
        m->pos += count;
        if (n > m->len - m->pos) return fail(m, CKPT_E_PICKLE_INVALID, "string of %llu bytes runs past the end", (unsigned long long)n);
        return string_value(m, (op == 'X' || op == 0x8c || op == 0x8d) ? CKPT__PK_STR
                               : (op == 'T' || op == 'U')            ? (ckpt__utf8_check(m->p + m->pos, (size_t)n) == n
                                                                            ? CKPT__PK_STR : CKPT__PK_BYTES)
                                                                      : CKPT__PK_BYTES,
                            (size_t)n);
    case ')': return push(m, new_value(m, CKPT__PK_TUPLE));
    case ']': return push(m, new_value(m, CKPT__PK_LIST));
    case '}': return push(m, new_value(m, CKPT__PK_DICT));
    case 0x8f: return push(m, new_value(m, CKPT__PK_SET)); /* EMPTY_SET */
    case 0x85: /* TUPLE1 */
    case 0x86: /* TUPLE2 */
    case 0x87: /* TUPLE3 */
        count = (size_t)(op - 0x84);
        if (m->depth - frame_base(m) < count) return fail(m, CKPT_E_PICKLE_INVALID, "stack underflow");
        m->depth -= count;
        if ((st = make_seq(m, CKPT__PK_TUPLE, stack_at(m, m->depth), count, &v))) return st;
        return push(m, v);
    case 't': /* TUPLE */
    case 'l': /* LIST */
    case 0x91: /* FROZENSET */
        if ((st = pop_mark(m, &first, &count))) return st;
        if ((st = make_seq(m, op == 't' ? CKPT__PK_TUPLE : op == 'l' ? CKPT__PK_LIST : CKPT__PK_SET, stack_at(m, first),
                           count, &v)))
            return st;
        return push(m, v);
    case 'd': /* DICT */
        if ((st = pop_mark(m, &first, &count))) return st;
        if (count % 2) return fail(m, CKPT_E_PICKLE_INVALID, "DICT with an odd number of values");
        if ((st = make_seq(m, CKPT__PK_DICT, stack_at(m, first), count, &v))) return st;
        return push(m, v);
    case 'a': /* APPEND */
        if ((st = pop(m, &v)) || (st = top(m, &w))) return st;
        if (w->kind != CKPT__PK_LIST) return fail(m, CKPT_E_PICKLE_INVALID, "APPEND on something that is not a list");
        return seq_add(m, w, v);
    case 'e': /* APPENDS */
    case 0x90: /* ADDITEMS */
        if ((st = pop_mark(m, &first, &count))) return st;
        return op_appends(m, first, count, op == 'e' ? CKPT__PK_LIST : CKPT__PK_SET);
    case 's': /* SETITEM */
        if (m->depth - frame_base(m) < 3) return fail(m, CKPT_E_PICKLE_INVALID, "stack underflow");
        m->depth -= 2;
        return op_setitems(m, m->depth, 2);
    case 'u': /* SETITEMS */
        if ((st = pop_mark(m, &first, &count))) return st;
        return op_setitems(m, first, count);
    case 'q': /* BINPUT */
    case 'r': /* LONG_BINPUT */
    case 'h': /* BINGET */
    case 'j': /* LONG_BINGET */
        count = (op == 'q' || op == 'h') ? 1 : 4;
        if ((st = need(m, count))) return st;
        n = le(m->p + m->pos, (int)count);
        m->pos += count;
        return (op == 'q' || op == 'r') ? memo_put(m, n) : memo_get(m, n);
    case 0x94: /* MEMOIZE */
        return memo_put(m, m->memo_next);
    case 'c': /* GLOBAL */
        return text_global(m);
    case 0x93: /* STACK_GLOBAL */
        if ((st = pop(m, &w)) || (st = pop(m, &v))) return st;
        if (v->kind != CKPT__PK_STR || w->kind != CKPT__PK_STR)
            return fail(m, CKPT_E_PICKLE_INVALID, "STACK_GLOBAL needs two strings");
        return global(m, v->u.s.data, v->u.s.len, w->u.s.data, w->u.s.len);
    case 'R': /* REDUCE */
        if ((st = pop(m, &w)) || (st = pop(m, &v))) return st;
        return apply(m, v, w, NULL, false);
    case 0x81: /* NEWOBJ */
        if ((st = pop(m, &w)) || (st = pop(m, &v))) return st;
        return apply(m, v, w, NULL, true);
    case 0x92: /* NEWOBJ_EX */
        if ((st = pop(m, &x)) || (st = pop(m, &w)) || (st = pop(m, &v))) return st;
        if (x->kind != CKPT__PK_DICT) return fail(m, CKPT_E_PICKLE_INVALID, "NEWOBJ_EX keyword arguments are not a dict");
        return apply(m, v, w, x, true);
    case 'b': /* BUILD */
        return op_build(m);
    case 'Q': /* BINPERSID */
        if ((st = pop(m, &w))) return st;
        v = new_value(m, CKPT__PK_PERSID);
        if (v) v->u.pid = w;
        return push(m, v);
    case 'i': return fail(m, CKPT_E_PICKLE_FORBIDDEN, "INST opcode (instantiates a class by name) is never allowed");
    case 'o': return fail(m, CKPT_E_PICKLE_FORBIDDEN, "OBJ opcode (instantiates a class) is never allowed");
    case 0x82:
    case 0x83:
    case 0x84: return fail(m, CKPT_E_PICKLE_FORBIDDEN, "EXT opcodes (the copyreg extension registry) are not allowed");
    case 0x97:
    case 0x98: return fail(m, CKPT_E_PICKLE_FORBIDDEN, "out-of-band buffers (protocol 5) are not supported");
    default:
        return fail(m, CKPT_E_PICKLE_INVALID, "unsupported opcode 0x%02x%s", op,
                    (op >= 0x20 && op < 0x7F) ? " (a protocol 0/1 text opcode)" : "");
    }
}

ckpt_status ckpt__pk_load(const unsigned char *data, size_t len, const ckpt__pk_source *src, ckpt__pk_allow_fn allow,
                          void *user, ckpt__arena *arena, ckpt__pk_value **out, size_t *consumed, ckpt_error *err) {
    vm m = {.p = data, .len = len, .src = src, .allow = allow, .user = user, .arena = arena, .err = err};
    ckpt_status st = CKPT_OK;
    bool stop = false;
    while (st == CKPT_OK && !stop) {
        if (m.pos >= m.len) {
            m.op_pos = m.pos;
            st = fail(&m, CKPT_E_PICKLE_INVALID, "ends without a STOP opcode");
            break;
        }
        st = step(&m, &stop);
    }
    if (st == CKPT_OK) {
        if (m.nmarks) st = fail(&m, CKPT_E_PICKLE_INVALID, "STOP with a MARK still open");
        else if (m.depth != 1) st = fail(&m, CKPT_E_PICKLE_INVALID, "STOP with %zu values on the stack (expected 1)", m.depth);
        else *out = m.stack[0];
    }
    if (consumed) *consumed = m.pos;
    free(m.stack);
    free(m.marks);
    free(m.memo);
    return st;
}
