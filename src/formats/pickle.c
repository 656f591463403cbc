/* pickle.c — see pickle.h. */
#include "pickle.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../base/cursor.h"
#include "../base/json.h" /* ckpt__utf8_check */

/* Bounds beyond what the input size already implies. */
enum { MAX_STACK = 1 << 24, MAX_MARKS = 1 << 20, MAX_MEMO = 1 << 26 };

struct op_def;

typedef struct vm {
    ckpt__rd in;               /* the pickle */
    size_t op_pos;             /* the current opcode's byte */
    unsigned char op;          /* and the opcode */
    const struct op_def *def;  /* and how it runs */
    bool stopped;              /* STOP was read */
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
    bool over; /* a charge was refused: the metadata budget is spent */
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

/* Charges what the current opcode allocates to the arena's budget (a
 * one-byte opcode makes a 48-byte value: a pickle of Nones costs 56 times
 * its size).  A refusal is recorded in m->err, and the allocation that
 * follows is not made: `over` keeps the status. */
static bool charge(vm *m, uint64_t bytes) {
    if (m->over) return false;
    ckpt_status st = ckpt__budget_charge(m->arena->budget, bytes, NULL, NULL, -1);
    if (st == CKPT_OK) return true;
    m->over = true;
    return false;
}

/* The failure after a value or array could not be had: over the budget,
 * or out of memory. */
static ckpt_status no_room(vm *m) {
    if (!m->over) return oom(m);
    return fail(m, CKPT_E_LIMIT,
                "its values would take more memory than the bound on metadata (%d times the input plus %llu MiB)",
                CKPT__BUDGET_FACTOR, (unsigned long long)(CKPT__BUDGET_BASE >> 20));
}

static ckpt__pk_value *new_value(vm *m, ckpt__pk_kind kind) {
    ckpt__pk_value *v = charge(m, sizeof *v) ? ckpt__arena_alloc(m->arena, sizeof *v) : NULL;
    if (!v) return NULL;
    memset(v, 0, sizeof *v);
    v->kind = (uint8_t)kind;
    v->offset = (uint32_t)m->op_pos;
    return v;
}

static ckpt_status push(vm *m, ckpt__pk_value *v) {
    if (!v) return no_room(m);
    if (m->depth == m->stack_cap) {
        if (m->stack_cap >= MAX_STACK) return fail(m, CKPT_E_LIMIT, "stack deeper than %d", MAX_STACK);
        size_t cap = m->stack_cap ? m->stack_cap * 2 : 64;
        ckpt__pk_value **s = charge(m, (cap - m->stack_cap) * sizeof *s) ? ckpt__realloc(m->stack, cap * sizeof *s) : NULL;
        if (!s) return no_room(m);
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
    if (m->depth <= frame_base(m)) return fail(m, CKPT__D(PICKLE_INVALID), "stack underflow");
    *out = m->stack[--m->depth];
    return CKPT_OK;
}

static ckpt_status top(vm *m, ckpt__pk_value **out) {
    if (m->depth <= frame_base(m)) return fail(m, CKPT__D(PICKLE_INVALID), "stack underflow");
    *out = m->stack[m->depth - 1];
    return CKPT_OK;
}

/* Pops everything above the last MARK and the mark itself; the values are
 * m->stack[*first .. *first + *count). */
static ckpt_status pop_mark(vm *m, size_t *first, size_t *count) {
    if (!m->nmarks) return fail(m, CKPT__D(PICKLE_INVALID), "no MARK on the stack");
    size_t base = m->marks[--m->nmarks];
    *first = base;
    *count = m->depth - base;
    m->depth = base;
    return CKPT_OK;
}

/* The failure of a read of n bytes that the pickle does not hold. */
static ckpt_status truncated(vm *m, size_t n) {
    return fail(m, CKPT__D(PICKLE_INVALID), "truncated: %zu bytes needed, %zu left", n, ckpt__rd_left(&m->in));
}

/* Room for `n` more items (the arena keeps outgrown arrays: a container
 * made whole is allocated once, exactly). */
static ckpt_status seq_reserve(vm *m, ckpt__pk_value *seq, size_t n) {
    size_t count = seq->u.seq.count;
    if (seq->u.seq.cap - count >= n) return CKPT_OK;
    if (n > UINT32_MAX - count) return fail(m, CKPT_E_LIMIT, "a container of more than %u items", UINT32_MAX);
    size_t cap = count + n;
    if (count && cap < 2 * (size_t)seq->u.seq.cap) cap = 2 * (size_t)seq->u.seq.cap; /* grown one by one: doubling */
    if (cap > UINT32_MAX) cap = UINT32_MAX;
    ckpt__pk_value **items = charge(m, cap * sizeof *items) ? ckpt__arena_alloc(m->arena, cap * sizeof *items) : NULL;
    if (!items) return no_room(m);
    if (count) memcpy(items, seq->u.seq.items, count * sizeof *items);
    seq->u.seq.items = items;
    seq->u.seq.cap = (uint32_t)cap;
    return CKPT_OK;
}

static ckpt_status seq_add_all(vm *m, ckpt__pk_value *seq, ckpt__pk_value *const *items, size_t n) {
    ckpt_status st = seq_reserve(m, seq, n);
    if (st) return st;
    if (n) memcpy(seq->u.seq.items + seq->u.seq.count, items, n * sizeof *items);
    seq->u.seq.count += (uint32_t)n;
    return CKPT_OK;
}

static ckpt_status seq_add(vm *m, ckpt__pk_value *seq, ckpt__pk_value *item) { return seq_add_all(m, seq, &item, 1); }

static ckpt_status make_seq(vm *m, ckpt__pk_kind kind, ckpt__pk_value *const *items, size_t n, ckpt__pk_value **out) {
    *out = NULL;
    ckpt__pk_value *v = new_value(m, kind);
    if (!v) return no_room(m);
    ckpt_status st = seq_add_all(m, v, items, n);
    if (st) return st;
    *out = v;
    return CKPT_OK;
}

static ckpt_status string_value(vm *m, ckpt__pk_kind kind, size_t n) {
    const char *s = (const char *)ckpt__rd_bytes(&m->in, n);
    if (!s) return truncated(m, n);
    if (kind == CKPT__PK_STR && ckpt__utf8_check((const unsigned char *)s, n) != n)
        return fail(m, CKPT__D(PICKLE_INVALID), "string is not valid UTF-8");
    ckpt__pk_value *v = new_value(m, kind);
    char *copy = v && charge(m, n + 1) ? ckpt__arena_strndup(m->arena, s, n) : NULL;
    if (!copy) return no_room(m);
    v->u.s.data = copy;
    v->u.s.len = n;
    return push(m, v);
}

static ckpt_status memo_put(vm *m, uint64_t index) {
    ckpt__pk_value *v = NULL;
    ckpt_status st = top(m, &v);
    if (st) return st;
    /* Picklers number memo entries 0, 1, 2, …; bound sparse indexes by the
     * input size so that a huge index cannot allocate a huge table. */
    if (index >= MAX_MEMO || index > 2 * (uint64_t)m->in.n + 16)
        return fail(m, CKPT_E_LIMIT, "memo index %llu is beyond the limit", (unsigned long long)index);
    if (index >= m->memo_cap) {
        size_t cap = m->memo_cap ? m->memo_cap : 64;
        while (cap <= index) cap *= 2;
        ckpt__pk_value **memo = charge(m, (cap - m->memo_cap) * sizeof *memo) ? ckpt__realloc(m->memo, cap * sizeof *memo) : NULL;
        if (!memo) return no_room(m);
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
        return fail(m, CKPT__D(PICKLE_INVALID), "memo index %llu was never stored", (unsigned long long)index);
    return push(m, m->memo[index]);
}

static ckpt_status global(vm *m, const char *module, size_t mlen, const char *name, size_t nlen) {
    ckpt__pk_value *v = new_value(m, CKPT__PK_GLOBAL);
    if (!v || !charge(m, mlen + nlen + 2)) return no_room(m);
    char *mod = ckpt__arena_strndup(m->arena, module, mlen), *nm = ckpt__arena_strndup(m->arena, name, nlen);
    if (!mod || !nm) return oom(m);
    if (strlen(mod) != mlen || strlen(nm) != nlen) return fail(m, CKPT__D(PICKLE_INVALID), "global name contains a NUL");
    /* Python 2 module names, as CPython's _compat_pickle and torch's
     * weights-only unpickler map them (protocol 2 writes them). */
    if (!strcmp(mod, "__builtin__")) mod = "builtins";
    else if (!strcmp(mod, "copy_reg")) mod = "copyreg";
    ckpt__pk_allowed allowed = m->allow ? m->allow(mod, nm, m->user) : CKPT__PK_DENY;
    if (allowed == CKPT__PK_DENY)
        return fail(m, CKPT__D(PICKLE_FORBIDDEN),
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
    const char *s = (const char *)m->in.p + m->in.at, *end = (const char *)m->in.p + m->in.n;
    const char *nl1 = memchr(s, '\n', (size_t)(end - s));
    if (!nl1) return fail(m, CKPT__D(PICKLE_INVALID), "GLOBAL without a newline");
    const char *name = nl1 + 1;
    const char *nl2 = memchr(name, '\n', (size_t)(end - name));
    if (!nl2) return fail(m, CKPT__D(PICKLE_INVALID), "GLOBAL without a second newline");
    ckpt__rd_skip(&m->in, (size_t)(nl2 + 1 - s));
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
    if (len > 8 || len == 0) return NULL;
    uint64_t u = big ? ckpt__load_be(b, (unsigned)len) : ckpt__load_le(b, (unsigned)len);
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
        return fail(m, CKPT__D(PICKLE_FORBIDDEN), "%s on something that is not an allowed global",
                    newobj ? "NEWOBJ" : "REDUCE");
    if (!args || args->kind != CKPT__PK_TUPLE)
        return fail(m, CKPT__D(PICKLE_INVALID), "arguments of %s.%s are not a tuple", callable->u.global.module,
                    callable->u.global.name);
    size_t n = args->u.seq.count;
    ckpt__pk_value **a = args->u.seq.items;
    ckpt__pk_value *v = NULL;
    if (callable->u.global.state_only && !newobj) {
        /* A caller's allowed global only rebuilds objects from their state
         * (NEWOBJ, then BUILD), or is a plain-data reconstructor. */
        if (!plain_data(callable))
            return fail(m, CKPT__D(PICKLE_FORBIDDEN),
                        "REDUCE of the allowed global %s.%s calls it with arguments; an allowed global only rebuilds "
                        "an object from its state (nothing was executed)",
                        callable->u.global.module, callable->u.global.name);
        if ((v = numpy_scalar(m, callable, a, n))) return push(m, v);
    }
    if (!kwargs && ckpt__pk_is_global(callable, "collections", "OrderedDict") && n == 0) {
        v = new_value(m, CKPT__PK_DICT);
        if (v) v->type = CKPT__PK_ORDERED_DICT;
    } else if (!kwargs && (ckpt__pk_is_global(callable, "builtins", "set") ||
                           ckpt__pk_is_global(callable, "builtins", "frozenset")) && n <= 1 &&
               (n == 0 || a[0]->kind == CKPT__PK_LIST || a[0]->kind == CKPT__PK_TUPLE)) {
        ckpt_status st = make_seq(m, CKPT__PK_SET, n ? a[0]->u.seq.items : NULL, n ? a[0]->u.seq.count : 0, &v);
        if (st) return st;
    } else if (!kwargs && ckpt__pk_is_global(callable, "torch", "Size") && n == 1 && a[0]->kind == CKPT__PK_TUPLE) {
        /* A tuple of its own: the argument may be the memo's, shared. */
        ckpt_status st = make_seq(m, CKPT__PK_TUPLE, a[0]->u.seq.items, a[0]->u.seq.count, &v);
        if (st) return st;
        v->type = CKPT__PK_TORCH_SIZE;
    } else if (!kwargs && ckpt__pk_is_global(callable, "_codecs", "encode") && n == 2 && a[0]->kind == CKPT__PK_STR &&
               a[1]->kind == CKPT__PK_STR && !strcmp(a[1]->u.s.data, "latin1")) {
        /* How protocol 2 pickles bytes: code points below 256, one byte each. */
        const unsigned char *s = (const unsigned char *)a[0]->u.s.data;
        unsigned char *out = charge(m, a[0]->u.s.len + 1) ? ckpt__arena_alloc(m->arena, a[0]->u.s.len + 1) : NULL;
        if (!out) return no_room(m);
        size_t k = 0;
        for (size_t i = 0; i < a[0]->u.s.len; i++) {
            if (s[i] < 0x80) out[k++] = s[i];
            else if ((s[i] == 0xC2 || s[i] == 0xC3) && i + 1 < a[0]->u.s.len)
                out[k++] = (unsigned char)(((s[i] & 0x03) << 6) | (s[i + 1] & 0x3F)), i++;
            else return fail(m, CKPT__D(PICKLE_INVALID), "latin1 encode of a character above U+00FF");
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
        return fail(m, CKPT__D(PICKLE_FORBIDDEN), "BUILD on something that no allowed global made");
    inst->state = state;
    return CKPT_OK;
}

static ckpt_status op_setitems(vm *m, size_t first, size_t count) {
    ckpt__pk_value *dict = NULL;
    ckpt_status st = top(m, &dict);
    if (st) return st;
    if (dict->kind != CKPT__PK_DICT) return fail(m, CKPT__D(PICKLE_INVALID), "SETITEM on something that is not a dict");
    if (count % 2) return fail(m, CKPT__D(PICKLE_INVALID), "SETITEMS with an odd number of values");
    return seq_add_all(m, dict, stack_at(m, first), count);
}

static ckpt_status op_appends(vm *m, size_t first, size_t count, ckpt__pk_kind want) {
    ckpt__pk_value *seq = NULL;
    ckpt_status st = top(m, &seq);
    if (st) return st;
    if (seq->kind != want)
        return fail(m, CKPT__D(PICKLE_INVALID), "%s on something that is not a %s", want == CKPT__PK_SET ? "ADDITEMS" : "APPEND",
                    want == CKPT__PK_SET ? "set" : "list");
    return seq_add_all(m, seq, stack_at(m, first), count);
}

/* Opcodes by their names in CPython's pickletools. */
enum opcode {
    OP_MARK = '(', OP_STOP = '.', OP_POP = '0', OP_POP_MARK = '1', OP_DUP = '2', OP_NONE = 'N',
    OP_BININT = 'J', OP_BININT1 = 'K', OP_BININT2 = 'M', OP_BINFLOAT = 'G',
    OP_BINUNICODE = 'X', OP_BINBYTES = 'B', OP_SHORT_BINBYTES = 'C', OP_BINSTRING = 'T', OP_SHORT_BINSTRING = 'U',
    OP_EMPTY_TUPLE = ')', OP_EMPTY_LIST = ']', OP_EMPTY_DICT = '}', OP_TUPLE = 't', OP_LIST = 'l', OP_DICT = 'd',
    OP_APPEND = 'a', OP_APPENDS = 'e', OP_SETITEM = 's', OP_SETITEMS = 'u',
    OP_BINPUT = 'q', OP_LONG_BINPUT = 'r', OP_BINGET = 'h', OP_LONG_BINGET = 'j',
    OP_GLOBAL = 'c', OP_REDUCE = 'R', OP_BUILD = 'b', OP_BINPERSID = 'Q', OP_INST = 'i', OP_OBJ = 'o',
    /* protocol 2 */
    OP_PROTO = 0x80, OP_NEWOBJ = 0x81, OP_EXT1 = 0x82, OP_EXT2 = 0x83, OP_EXT4 = 0x84,
    OP_TUPLE1 = 0x85, OP_TUPLE2 = 0x86, OP_TUPLE3 = 0x87, OP_NEWTRUE = 0x88, OP_NEWFALSE = 0x89,
    OP_LONG1 = 0x8a, OP_LONG4 = 0x8b,
    /* protocol 3 and 4 */
    OP_SHORT_BINUNICODE = 0x8c, OP_BINUNICODE8 = 0x8d, OP_BINBYTES8 = 0x8e, OP_EMPTY_SET = 0x8f,
    OP_ADDITEMS = 0x90, OP_FROZENSET = 0x91, OP_NEWOBJ_EX = 0x92, OP_STACK_GLOBAL = 0x93, OP_MEMOIZE = 0x94,
    OP_FRAME = 0x95,
    /* protocol 5 */
    OP_BYTEARRAY8 = 0x96, OP_NEXT_BUFFER = 0x97, OP_READONLY_BUFFER = 0x98,
};

/* How an opcode runs: its handler, and what the handler varies by. */
typedef struct op_def {
    ckpt_status (*run)(vm *m);
    uint8_t width;       /* bytes of its argument (TUPLE1..3: the items it takes) */
    uint8_t kind;        /* the kind of value it makes */
    bool flag;           /* BININT: signed; BINSTRING: a Python 2 str; BINPUT: a put; NEWTRUE: true */
    const char *refusal; /* a forbidden opcode: why */
} op_def;

/* A little-endian unsigned argument of `width` bytes. */
static ckpt_status read_uint(vm *m, size_t width, uint64_t *out) {
    *out = ckpt__rd_le(&m->in, (unsigned)width);
    return m->in.bad ? truncated(m, width) : CKPT_OK;
}

static ckpt_status op_proto(vm *m) {
    uint64_t version = 0;
    ckpt_status st = read_uint(m, 1, &version);
    if (st == CKPT_OK && version > 5) return fail(m, CKPT__D(PICKLE_INVALID), "unknown protocol %u", (unsigned)version);
    return st;
}

/* FRAME: a length prefix; the framed opcodes follow inline. */
static ckpt_status op_frame(vm *m) {
    uint64_t n = 0;
    ckpt_status st = read_uint(m, 8, &n);
    if (st == CKPT_OK && n > ckpt__rd_left(&m->in))
        return fail(m, CKPT__D(PICKLE_INVALID), "frame of %llu bytes runs past the end", (unsigned long long)n);
    return st;
}

static ckpt_status op_mark(vm *m) {
    if (m->nmarks == m->marks_cap) {
        if (m->marks_cap >= MAX_MARKS) return fail(m, CKPT_E_LIMIT, "more than %d nested MARKs", MAX_MARKS);
        size_t cap = m->marks_cap ? m->marks_cap * 2 : 16;
        size_t *mk = charge(m, (cap - m->marks_cap) * sizeof *mk) ? ckpt__realloc(m->marks, cap * sizeof *mk) : NULL;
        if (!mk) return no_room(m);
        m->marks = mk;
        m->marks_cap = cap;
    }
    m->marks[m->nmarks++] = m->depth;
    return CKPT_OK;
}

static ckpt_status op_bool(vm *m) {
    ckpt__pk_value *v = new_value(m, CKPT__PK_BOOL);
    if (v) v->u.b = m->def->flag;
    return push(m, v);
}

/* BININT (signed 4 bytes), BININT1 and BININT2 (unsigned). */
static ckpt_status op_binint(vm *m) {
    uint64_t u = 0;
    ckpt_status st = read_uint(m, m->def->width, &u);
    if (st) return st;
    ckpt__pk_value *v = new_value(m, CKPT__PK_INT);
    if (v) v->u.i = m->def->flag ? (int64_t)(int32_t)(uint32_t)u : (int64_t)u;
    return push(m, v);
}

/* LONG1 and LONG4: a two's-complement integer of n little-endian bytes;
 * beyond 8 bytes it is kept as its bytes. */
static ckpt_status op_long(vm *m) {
    uint64_t n = 0;
    ckpt_status st = read_uint(m, m->def->width, &n);
    if (st) return st;
    if (n > 8) return string_value(m, CKPT__PK_BIGINT, n);
    const unsigned char *b = ckpt__rd_bytes(&m->in, n);
    if (!b) return truncated(m, n);
    uint64_t u = ckpt__load_le(b, (unsigned)n);
    if (n && n < 8 && (b[n - 1] & 0x80)) u |= ~0ULL << (8 * n); /* sign-extend */
    ckpt__pk_value *v = new_value(m, CKPT__PK_INT);
    if (v) v->u.i = (int64_t)u;
    return push(m, v);
}

/* BINFLOAT: a big-endian double. */
static ckpt_status op_binfloat(vm *m) {
    uint64_t bits = ckpt__rd_u64be(&m->in);
    if (m->in.bad) return truncated(m, 8);
    ckpt__pk_value *v = new_value(m, CKPT__PK_FLOAT);
    if (v) memcpy(&v->u.f, &bits, 8);
    return push(m, v);
}

/* Length-prefixed strings and bytes.  Python 2 str (BINSTRING) is text
 * when it is valid UTF-8, bytes otherwise. */
static ckpt_status op_counted(vm *m) {
    uint64_t n = 0;
    ckpt__pk_kind kind = m->def->kind;
    ckpt_status st = read_uint(m, m->def->width, &n);
    if (st) return st;
    if (n > ckpt__rd_left(&m->in))
        return fail(m, CKPT__D(PICKLE_INVALID), "string of %llu bytes runs past the end", (unsigned long long)n);
    if (m->def->flag) kind = ckpt__utf8_check(m->in.p + m->in.at, (size_t)n) == n ? CKPT__PK_STR : CKPT__PK_BYTES;
    return string_value(m, kind, (size_t)n);
}

static ckpt_status op_empty(vm *m) { return push(m, new_value(m, m->def->kind)); }

/* TUPLE1..3: the top `count` values. */
static ckpt_status op_tuple_n(vm *m) {
    size_t count = m->def->width;
    if (m->depth - frame_base(m) < count) return fail(m, CKPT__D(PICKLE_INVALID), "stack underflow");
    m->depth -= count;
    ckpt__pk_value *v = NULL;
    ckpt_status st = make_seq(m, CKPT__PK_TUPLE, stack_at(m, m->depth), count, &v);
    return st ? st : push(m, v);
}

/* TUPLE, LIST, FROZENSET and DICT: what lies above the last MARK. */
static ckpt_status op_from_mark(vm *m) {
    ckpt__pk_kind kind = m->def->kind;
    size_t first = 0, count = 0;
    ckpt__pk_value *v = NULL;
    ckpt_status st = pop_mark(m, &first, &count);
    if (st) return st;
    if (kind == CKPT__PK_DICT && count % 2) return fail(m, CKPT__D(PICKLE_INVALID), "DICT with an odd number of values");
    if ((st = make_seq(m, kind, stack_at(m, first), count, &v))) return st;
    return push(m, v);
}

static ckpt_status op_append(vm *m) {
    ckpt__pk_value *item = NULL, *list = NULL;
    ckpt_status st;
    if ((st = pop(m, &item)) || (st = top(m, &list))) return st;
    if (list->kind != CKPT__PK_LIST) return fail(m, CKPT__D(PICKLE_INVALID), "APPEND on something that is not a list");
    return seq_add(m, list, item);
}

static ckpt_status op_setitem(vm *m) {
    if (m->depth - frame_base(m) < 3) return fail(m, CKPT__D(PICKLE_INVALID), "stack underflow");
    m->depth -= 2;
    return op_setitems(m, m->depth, 2);
}

/* APPENDS, ADDITEMS and SETITEMS: what lies above the last MARK goes into
 * the container below it. */
static ckpt_status op_many(vm *m) {
    size_t first = 0, count = 0;
    ckpt_status st = pop_mark(m, &first, &count);
    if (st) return st;
    if (m->op == OP_SETITEMS) return op_setitems(m, first, count);
    return op_appends(m, first, count, m->def->kind);
}

static ckpt_status op_memo(vm *m) {
    uint64_t n = 0;
    ckpt_status st = read_uint(m, m->def->width, &n);
    if (st) return st;
    return m->def->flag ? memo_put(m, n) : memo_get(m, n);
}

static ckpt_status op_memoize(vm *m) { return memo_put(m, m->memo_next); }

static ckpt_status op_stack_global(vm *m) {
    ckpt__pk_value *module = NULL, *name = NULL;
    ckpt_status st;
    if ((st = pop(m, &name)) || (st = pop(m, &module))) return st;
    if (module->kind != CKPT__PK_STR || name->kind != CKPT__PK_STR)
        return fail(m, CKPT__D(PICKLE_INVALID), "STACK_GLOBAL needs two strings");
    return global(m, module->u.s.data, module->u.s.len, name->u.s.data, name->u.s.len);
}

/* REDUCE, NEWOBJ (callable, args) and NEWOBJ_EX (callable, args, kwargs). */
static ckpt_status op_call(vm *m) {
    unsigned char op = m->op;
    ckpt__pk_value *callable = NULL, *args = NULL, *kwargs = NULL;
    ckpt_status st;
    if (op == OP_NEWOBJ_EX && (st = pop(m, &kwargs))) return st;
    if ((st = pop(m, &args)) || (st = pop(m, &callable))) return st;
    if (kwargs && kwargs->kind != CKPT__PK_DICT)
        return fail(m, CKPT__D(PICKLE_INVALID), "NEWOBJ_EX keyword arguments are not a dict");
    return apply(m, callable, args, kwargs, op != OP_REDUCE);
}

static ckpt_status op_binpersid(vm *m) {
    ckpt__pk_value *pid = NULL;
    ckpt_status st = pop(m, &pid);
    if (st) return st;
    ckpt__pk_value *v = new_value(m, CKPT__PK_PERSID);
    if (v) v->u.pid = pid;
    return push(m, v);
}

static ckpt_status op_stop(vm *m) {
    m->stopped = true;
    return CKPT_OK;
}

static ckpt_status op_pop_mark(vm *m) {
    size_t first = 0, count = 0;
    return pop_mark(m, &first, &count);
}

/* POP; at the bottom of a frame it drops the MARK itself, as CPython does. */
static ckpt_status op_pop(vm *m) {
    ckpt__pk_value *v = NULL;
    return m->depth == frame_base(m) && m->nmarks ? op_pop_mark(m) : pop(m, &v);
}

static ckpt_status op_dup(vm *m) {
    ckpt__pk_value *v = NULL;
    ckpt_status st = top(m, &v);
    return st ? st : push(m, v);
}

static ckpt_status op_refused(vm *m) { return fail(m, CKPT__D(PICKLE_FORBIDDEN), "%s", m->def->refusal); }

enum { STR = CKPT__PK_STR, BYTES = CKPT__PK_BYTES };

#define EXT_REFUSAL "EXT opcodes (the copyreg extension registry) are not allowed"
#define BUFFER_REFUSAL "out-of-band buffers (protocol 5) are not supported"

/* Every opcode read; the others are refused as unsupported. */
static const op_def op_defs[256] = {
    [OP_PROTO] = {op_proto}, [OP_FRAME] = {op_frame}, [OP_STOP] = {op_stop}, [OP_MARK] = {op_mark},
    [OP_POP] = {op_pop}, [OP_POP_MARK] = {op_pop_mark}, [OP_DUP] = {op_dup},
    [OP_NONE] = {op_empty, 0, CKPT__PK_NONE}, [OP_NEWTRUE] = {op_bool, 0, 0, true}, [OP_NEWFALSE] = {op_bool},
    [OP_BININT] = {op_binint, 4, 0, true}, [OP_BININT1] = {op_binint, 1}, [OP_BININT2] = {op_binint, 2},
    [OP_LONG1] = {op_long, 1}, [OP_LONG4] = {op_long, 4}, [OP_BINFLOAT] = {op_binfloat},
    [OP_SHORT_BINUNICODE] = {op_counted, 1, STR}, [OP_BINUNICODE] = {op_counted, 4, STR},
    [OP_BINUNICODE8] = {op_counted, 8, STR}, [OP_SHORT_BINBYTES] = {op_counted, 1, BYTES},
    [OP_BINBYTES] = {op_counted, 4, BYTES}, [OP_BINBYTES8] = {op_counted, 8, BYTES},
    [OP_BYTEARRAY8] = {op_counted, 8, BYTES}, [OP_SHORT_BINSTRING] = {op_counted, 1, BYTES, true},
    [OP_BINSTRING] = {op_counted, 4, BYTES, true},
    [OP_EMPTY_TUPLE] = {op_empty, 0, CKPT__PK_TUPLE}, [OP_EMPTY_LIST] = {op_empty, 0, CKPT__PK_LIST},
    [OP_EMPTY_DICT] = {op_empty, 0, CKPT__PK_DICT}, [OP_EMPTY_SET] = {op_empty, 0, CKPT__PK_SET},
    [OP_TUPLE1] = {op_tuple_n, 1}, [OP_TUPLE2] = {op_tuple_n, 2}, [OP_TUPLE3] = {op_tuple_n, 3},
    [OP_TUPLE] = {op_from_mark, 0, CKPT__PK_TUPLE}, [OP_LIST] = {op_from_mark, 0, CKPT__PK_LIST},
    [OP_FROZENSET] = {op_from_mark, 0, CKPT__PK_SET}, [OP_DICT] = {op_from_mark, 0, CKPT__PK_DICT},
    [OP_APPEND] = {op_append}, [OP_SETITEM] = {op_setitem},
    [OP_APPENDS] = {op_many, 0, CKPT__PK_LIST}, [OP_ADDITEMS] = {op_many, 0, CKPT__PK_SET}, [OP_SETITEMS] = {op_many},
    [OP_BINPUT] = {op_memo, 1, 0, true}, [OP_LONG_BINPUT] = {op_memo, 4, 0, true},
    [OP_BINGET] = {op_memo, 1}, [OP_LONG_BINGET] = {op_memo, 4}, [OP_MEMOIZE] = {op_memoize},
    [OP_GLOBAL] = {text_global}, [OP_STACK_GLOBAL] = {op_stack_global}, [OP_BINPERSID] = {op_binpersid},
    [OP_REDUCE] = {op_call}, [OP_NEWOBJ] = {op_call}, [OP_NEWOBJ_EX] = {op_call}, [OP_BUILD] = {op_build},
    [OP_INST] = {op_refused, .refusal = "INST opcode (instantiates a class by name) is never allowed"},
    [OP_OBJ] = {op_refused, .refusal = "OBJ opcode (instantiates a class) is never allowed"},
    [OP_EXT1] = {op_refused, .refusal = EXT_REFUSAL}, [OP_EXT2] = {op_refused, .refusal = EXT_REFUSAL},
    [OP_EXT4] = {op_refused, .refusal = EXT_REFUSAL},
    [OP_NEXT_BUFFER] = {op_refused, .refusal = BUFFER_REFUSAL}, [OP_READONLY_BUFFER] = {op_refused, .refusal = BUFFER_REFUSAL},
};

/* One opcode. */
static ckpt_status step(vm *m) {
    m->op_pos = m->in.at;
    m->op = ckpt__rd_u8(&m->in);
    if (m->in.bad) return truncated(m, 1);
    m->def = &op_defs[m->op];
    if (m->def->run) return m->def->run(m);
    return fail(m, CKPT__D(PICKLE_INVALID), "unsupported opcode 0x%02x%s", m->op,
                (m->op >= 0x20 && m->op < 0x7F) ? " (a protocol 0/1 text opcode)" : "");
}

ckpt_status ckpt__pk_load(const unsigned char *data, size_t len, const ckpt__pk_source *src, ckpt__pk_allow_fn allow,
                          void *user, ckpt__arena *arena, ckpt__pk_value **out, size_t *consumed, ckpt_error *err) {
    vm m = {.in = ckpt__rd_over(data, len, 0), .src = src, .allow = allow, .user = user, .arena = arena, .err = err};
    ckpt_status st = CKPT_OK;
    while (st == CKPT_OK && !m.stopped) {
        if (!ckpt__rd_left(&m.in)) {
            m.op_pos = m.in.at;
            st = fail(&m, CKPT__D(PICKLE_INVALID), "ends without a STOP opcode");
            break;
        }
        st = step(&m);
    }
    if (st == CKPT_OK) {
        if (m.nmarks) st = fail(&m, CKPT__D(PICKLE_INVALID), "STOP with a MARK still open");
        else if (m.depth != 1) st = fail(&m, CKPT__D(PICKLE_INVALID), "STOP with %zu values on the stack (expected 1)", m.depth);
        else *out = m.stack[0];
    }
    if (consumed) *consumed = m.in.at;
    free(m.stack);
    free(m.marks);
    free(m.memo);
    /* the values stay (in the arena); the stack, marks and memo go */
    ckpt__budget_release(arena->budget, m.stack_cap * sizeof *m.stack + m.marks_cap * sizeof *m.marks +
                                            m.memo_cap * sizeof *m.memo);
    return st;
}
