/*
 * base.h — internal helpers shared by every layer: error reporting, checked
 * arithmetic, an arena allocator and a string hash table.  Depends on nothing
 * but ckpt.h and libc.
 */
#ifndef CKPT_BASE_H
#define CKPT_BASE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "ckpt.h"
#include "fault.h"

#if defined(__GNUC__)
#define CKPT__PRINTF(fmt, args) __attribute__((format(printf, fmt, args)))
#define CKPT__HIDDEN __attribute__((visibility("hidden")))
#else
#define CKPT__PRINTF(fmt, args)
#define CKPT__HIDDEN
#endif

/* A detail passed where a status goes (their numbers never coincide): the
 * error setters record it as err->detail and return its category. */
#define CKPT__D(name) ((ckpt_status)CKPT_D_##name)

/* The category of a code: a detail's (see CKPT__D), else the code itself. */
CKPT__HIDDEN ckpt_status ckpt__category(ckpt_status code);

/* The code to record again an error `e` a lower layer or a caller's table
 * reported with status `st`: its detail, when it has one of that status. */
CKPT__HIDDEN ckpt_status ckpt__code_of(const ckpt_error *e, ckpt_status st);

/*
 * Records a failure in `err` (when not NULL) and returns its category, so
 * that callers can write `return ckpt__fail(err, ...)`.  `status` is a
 * category or a detail (CKPT__D); the detail, if any, goes to err->detail.  `path` and `tensor` may
 * be NULL; `offset` is -1 when no byte offset applies.  The message is
 * prefixed with the path, tensor and offset so it reads on its own.
 */
CKPT__HIDDEN ckpt_status ckpt__fail(ckpt_error *err, ckpt_status status, const char *path,
                                    const char *tensor, int64_t offset, const char *fmt, ...)
    CKPT__PRINTF(6, 7);

/* Like ckpt__fail for a failed system call: records errno (`sys_errno`) and
 * maps ENOSPC/EDQUOT to CKPT_E_NO_SPACE, ENOENT to CKPT_E_NOT_FOUND, EEXIST to
 * CKPT_E_EXISTS and the rest to CKPT_E_IO. */
CKPT__HIDDEN ckpt_status ckpt__fail_errno(ckpt_error *err, int sys_errno, const char *path,
                                          int64_t offset, const char *fmt, ...)
    CKPT__PRINTF(5, 6);

/* Names the tensor in an error a lower layer reported without one (a
 * source read, a mapping): sets err->tensor and inserts it in the message.
 * Returns `status`, so callers can write `return ckpt__error_in_tensor(…)`. */
CKPT__HIDDEN ckpt_status ckpt__error_in_tensor(ckpt_error *err, ckpt_status status, const char *tensor);

/* The one out-of-memory failure: CKPT_E_NO_MEMORY naming `path` (may be
 * NULL) and, when given, what could not be allocated. */
CKPT__HIDDEN ckpt_status ckpt__oom(ckpt_error *err, const char *path, const char *what);

/* Takes a caller's options struct into `dst` (holding the defaults): the
 * caller's `size` first bytes — a caller built against an older header has
 * a shorter struct; size 0 (not initialised) is taken as this version's. */
#define CKPT__TAKE_OPTIONS(dst, src)                                                                  \
    memcpy((dst), (src), (src)->size && (src)->size < sizeof *(dst) ? (src)->size : sizeof *(dst))

/* Checked arithmetic: false on overflow. */
static inline bool ckpt__mul_u64(uint64_t a, uint64_t b, uint64_t *out) {
    return !__builtin_mul_overflow(a, b, out);
}
static inline bool ckpt__add_u64(uint64_t a, uint64_t b, uint64_t *out) {
    return !__builtin_add_overflow(a, b, out);
}

/* Size in bytes of `numel` elements of `dtype`.  Returns CKPT__D(SHAPE_OVERFLOW)
 * past 2^64 bytes, CKPT__D(PARTIAL_BYTE) when it is not a whole number of
 * bytes, CKPT__D(GGUF_DIMS) of blocks; does not fill an error.  A tensor's
 * size is ckpt__tensor_size's. */
CKPT__HIDDEN ckpt_status ckpt__dtype_nbytes(ckpt_dtype dtype, uint64_t numel, uint64_t *nbytes);

/* False when `dtype` is a block type and the innermost dimension of the
 * shape is not a whole number of its blocks (or there is none). */
CKPT__HIDDEN bool ckpt__block_rows_ok(ckpt_dtype dtype, uint32_t ndim, const uint64_t *shape);

/* Product of a shape (0 when an axis is 0); false when the product of its
 * nonzero axes passes INT64_MAX, as in ckpt__tensor_size. */
CKPT__HIDDEN bool ckpt__shape_numel(uint32_t ndim, const uint64_t *shape, uint64_t *numel);

/*
 * The one check of a tensor's size — every format's tensors
 * (ckpt__cat_add_tensor), the writer's, a plan's casts, a rank's decoded
 * catalog: its elements and its bytes in `dtype`.  CKPT__D(SHAPE_OVERFLOW)
 * when the product of its nonzero axes passes INT64_MAX, in elements or in
 * bytes, whatever other axis is 0: safetensors refuses a header where any
 * partial product of the shape overflows (its Rust validation multiplies
 * the axes in order with checked_mul), and numpy and torch refuse an array
 * whose nonzero axes' product in bytes passes int64 ("array is too big"),
 * so ckpt neither reads nor writes one.  Then no product of any of the
 * axes, of a slice of them, or of strides over them, overflows an int64:
 * the engine's strides and offsets rely on it.  CKPT__D(UNKNOWN_DTYPE),
 * CKPT__D(PARTIAL_BYTE) and CKPT__D(GGUF_DIMS) as ckpt__dtype_nbytes.  Does not
 * fill an error.
 */
CKPT__HIDDEN ckpt_status ckpt__tensor_size(ckpt_dtype dtype, uint32_t ndim, const uint64_t *shape, uint64_t *numel,
                                           uint64_t *nbytes);

/* A float's bits, and the float of some bits. */
static inline uint32_t ckpt__f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}
static inline float ckpt__f32_from(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* float16 and bfloat16 to and from float32, bit for bit as torch on CPU
 * (dtype.c): what every cast kernel (transform/cast*.c) and ggml's block
 * types (transform/quant.c) build on, and the reference for the SIMD
 * kernels. */
CKPT__HIDDEN float ckpt__f16_to_f32(uint16_t h);
CKPT__HIDDEN uint16_t ckpt__f32_to_f16(float f);
CKPT__HIDDEN float ckpt__bf16_to_f32(uint16_t b);
CKPT__HIDDEN uint16_t ckpt__f32_to_bf16(float f);

/* Reverses the bytes of each `unit`-byte element of p[0, n) (a big-endian
 * file's numbers); units of 0 or 1 byte are left as they are. */
static inline void ckpt__swap_units(unsigned char *p, uint64_t n, unsigned unit) {
    if (unit < 2) return;
    for (uint64_t i = 0; i + unit <= n; i += unit)
        for (unsigned a = 0, z = unit - 1; a < z; a++, z--) {
            unsigned char t = p[i + a];
            p[i + a] = p[i + z];
            p[i + z] = t;
        }
}

/* ---- text ---------------------------------------------------------------- */

/* Offset of the first byte that is not valid UTF-8 (overlong forms,
 * surrogates and code points above U+10FFFF included), or `len` if all is
 * valid. */
CKPT__HIDDEN size_t ckpt__utf8_check(const unsigned char *s, size_t len);

/* A growable output buffer, always NUL-terminated; `failed` is set on
 * allocation failure and every later append is ignored. */
typedef struct ckpt__buf {
    char *data;
    size_t len, cap;
    bool failed;
} ckpt__buf;

CKPT__HIDDEN void ckpt__buf_append(ckpt__buf *b, const char *s, size_t n);
CKPT__HIDDEN void ckpt__buf_puts(ckpt__buf *b, const char *s);
CKPT__HIDDEN void ckpt__buf_u64(ckpt__buf *b, uint64_t v);
/* The text built, the caller's to free (an empty one too), or NULL when
 * an append failed (the buffer is then freed). */
CKPT__HIDDEN char *ckpt__buf_text(ckpt__buf *b);

/* The shortest decimal text of a finite `v` that reads back as the same
 * value of its own type: a float32 (`single`, e.g. 1e-05 for the float
 * nearest 0.00001, not 9.99999975e-06) or a double (0.1, as Python's repr).
 * `out` holds at least 32 bytes. */
CKPT__HIDDEN void ckpt__shortest_float(char *out, size_t cap, double v, bool single);

/* ---- arena: many small allocations freed together ---------------------- */

typedef struct ckpt__arena_block ckpt__arena_block;
typedef struct ckpt__budget ckpt__budget;
typedef struct ckpt__arena_adopted ckpt__arena_adopted;
typedef struct ckpt__arena {
    ckpt__arena_block *head;
    size_t used; /* bytes used in head */
    size_t cap;  /* capacity of head   */
    ckpt__arena_adopted *adopted; /* malloc'ed blocks freed with the arena */
    /* The metadata budget (below) that parsers filling this arena charge:
     * a catalog's, or NULL. */
    ckpt__budget *budget;
} ckpt__arena;

/* Returns 8-byte aligned memory, or NULL when out of memory. */
CKPT__HIDDEN void *ckpt__arena_alloc(ckpt__arena *arena, size_t size);
/* Copies `len` bytes and a terminating NUL. */
CKPT__HIDDEN char *ckpt__arena_strndup(ckpt__arena *arena, const char *s, size_t len);
/* Takes a malloc'ed block over, freed with the arena (text built in a
 * ckpt__buf stays where it is, not copied).  False when out of memory: the
 * block is then freed. */
CKPT__HIDDEN bool ckpt__arena_adopt(ckpt__arena *arena, void *block);
CKPT__HIDDEN void ckpt__arena_free(ckpt__arena *arena);

/* ---- explicit stacks ------------------------------------------------------ */

/*
 * A growable stack of fixed-size frames on the heap.  Walks of trees whose
 * shape the input decides (parsers, object trees) keep their frames here
 * rather than on the C stack, whose depth a caller's thread may limit to
 * 64 KiB: no recursion on input depth.  Initialise with CKPT__STACK(type).
 */
typedef struct ckpt__stack {
    unsigned char *data;
    size_t len, cap, size; /* frames in use, frames allocated, bytes per frame */
} ckpt__stack;

#define CKPT__STACK(type) ((ckpt__stack){.size = sizeof(type)})

/* A new zeroed top frame, or NULL when out of memory.  Frames may move:
 * a pointer to a frame holds only until the next push. */
CKPT__HIDDEN void *ckpt__stack_push(ckpt__stack *stack);
static inline void *ckpt__stack_top(const ckpt__stack *stack) {
    return stack->len ? stack->data + (stack->len - 1) * stack->size : NULL;
}
static inline void ckpt__stack_pop(ckpt__stack *stack) { stack->len--; }
CKPT__HIDDEN void ckpt__stack_free(ckpt__stack *stack);

/* Room for one more item at the end of a growable array of `count` items of
 * `size` bytes: the array, moved when it grew (its capacity *cap doubled, or
 * `first` to begin with), or NULL when out of memory (left as it was). */
static inline void *ckpt__grow(void *items, size_t count, size_t *cap, size_t size, size_t first) {
    if (count < *cap) return items;
    size_t n = *cap ? *cap * 2 : first;
    void *grown = ckpt__realloc(items, n * size);
    if (grown) *cap = n;
    return grown;
}

/* The order of strings (an array of char *) for qsort and bsearch. */
static inline int ckpt__cmp_str(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* ---- the metadata budget ---------------------------------------------------- */

/*
 * What the metadata of an input may cost in memory: CKPT__BUDGET_FACTOR
 * times the bytes of the input plus CKPT__BUDGET_BASE.  Parsers charge what
 * they allocate for what they read (values, nodes, strings, the object
 * tree's text) and release what they free; a charge beyond the bound is
 * refused with CKPT_E_LIMIT naming the file and the byte where it was
 * crossed.  A catalog holds one (ckpt__cat_budget) that every source it
 * opens adds to; a NULL budget bounds nothing.
 */
#define CKPT__BUDGET_FACTOR 8
#define CKPT__BUDGET_BASE (64ULL << 20)

struct ckpt__budget {
    uint64_t input; /* bytes of input: the bound is FACTOR × input + BASE */
    uint64_t used;  /* bytes charged and not released */
};

CKPT__HIDDEN void ckpt__budget_add_input(ckpt__budget *budget, uint64_t bytes);
/* Charges `bytes` allocated for what `path` holds at byte `offset`. */
CKPT__HIDDEN ckpt_status ckpt__budget_charge(ckpt__budget *budget, uint64_t bytes, ckpt_error *err, const char *path,
                                             int64_t offset);
CKPT__HIDDEN void ckpt__budget_release(ckpt__budget *budget, uint64_t bytes);

/*
 * Charges a buffer's growth since the last call (*charged: the capacity
 * charged so far, 0 at first), so that text built from the input (an
 * object tree, a value's JSON) counts at the capacity it holds.
 */
CKPT__HIDDEN ckpt_status ckpt__budget_charge_buf(ckpt__budget *budget, const ckpt__buf *buf, size_t *charged,
                                                 ckpt_error *err, const char *path, int64_t offset);

/* ---- ordered string pairs (metadata maps) -------------------------------- */

typedef struct ckpt__name_table ckpt__name_table;

/*
 * A value kept in a format's own encoding, its JSON text written only when
 * someone asks: GGUF's typed key-values (type and payload as a GGUF file
 * holds them, gguf.h), carried from the reader to the writer as bytes that
 * the format's output copies, and that any other consumer (the public
 * metadata map, a safetensors output's __metadata__) reads as text.
 */
typedef struct ckpt__encoded {
    const void *format; /* whose encoding: an output copies only its own */
    const unsigned char *bytes;
    size_t len;
    char *(*json)(const struct ckpt__encoded *value); /* its text, malloc'ed; NULL when out of memory */
} ckpt__encoded;

typedef struct ckpt__pairs {
    size_t count, cap;
    const char **keys, **values; /* the strings are the caller's */
    /* NULL, or per pair an encoded value (the caller's, living as long
     * as the pairs) whose JSON text is written into `values` only when
     * someone asks for the text (ckpt__pairs_text). */
    const ckpt__encoded **typed;
    /* Beyond a handful of pairs, a hash of the keys (a file may declare a
     * million: looking each up among the others took hours). */
    struct ckpt__name_table *index;
    size_t index_cap;
} ckpt__pairs;

/* Appends a pair; false when out of memory. */
CKPT__HIDDEN bool ckpt__pairs_push(ckpt__pairs *pairs, const char *key, const char *value);
/* Appends a pair whose value is encoded (its text written when asked);
 * false when out of memory. */
CKPT__HIDDEN bool ckpt__pairs_push_value(ckpt__pairs *pairs, const char *key, const ckpt__encoded *value);
/* Pair i's encoded value, or NULL when it was pushed as text. */
static inline const ckpt__encoded *ckpt__pairs_value(const ckpt__pairs *pairs, size_t i) {
    return pairs->typed ? pairs->typed[i] : NULL;
}
/* Pair i's text: an encoded value's JSON, written on the first ask (from any
 * thread: the first text stored wins) and kept by the pairs; NULL when out
 * of memory. */
CKPT__HIDDEN const char *ckpt__pairs_text(const ckpt__pairs *pairs, size_t i);
/* Pair i's value replaced by text (the caller's). */
CKPT__HIDDEN void ckpt__pairs_set(ckpt__pairs *pairs, size_t i, const char *value);
/* Pair i's value replaced by an encoded value (the caller's); false when
 * out of memory (the pair unchanged). */
CKPT__HIDDEN bool ckpt__pairs_set_value(ckpt__pairs *pairs, size_t i, const ckpt__encoded *value);
/* The index of the first pair with this key, or -1. */
CKPT__HIDDEN int64_t ckpt__pairs_find(const ckpt__pairs *pairs, const char *key);
/* The text of the first pair with this key (ckpt__pairs_text), or NULL. */
CKPT__HIDDEN const char *ckpt__pairs_get(const ckpt__pairs *pairs, const char *key);
CKPT__HIDDEN void ckpt__pairs_free(ckpt__pairs *pairs);

/* ---- string → index hash table (open addressing) ----------------------- */

struct ckpt__name_table {
    /* (32 bits of the name's hash) << 32 | (index + 1); 0 = empty.  The
     * hash is compared before the names, so a probe past another name
     * costs no visit to the caller's array. */
    uint64_t *slots;
    size_t mask;
};

/* Hash of a NUL-terminated string (FNV-1a 64). */
CKPT__HIDDEN uint64_t ckpt__hash_str(const char *s);

/* Prepares a table for up to `count` names; false when out of memory. */
CKPT__HIDDEN bool ckpt__name_table_init(ckpt__name_table *table, size_t count);
CKPT__HIDDEN void ckpt__name_table_free(ckpt__name_table *table);

/*
 * Inserts `index` for `names[index]`.  `names` is the array the indexes
 * point into.  If the name is already present, nothing is inserted and the
 * existing index is returned in *existing and false returned.
 */
CKPT__HIDDEN bool ckpt__name_table_insert(ckpt__name_table *table, const char *const *names,
                                          size_t stride, uint32_t index, uint32_t *existing);

/* Makes room for `count` names without visiting them (the stored hashes
 * place them again); false when out of memory (the table is unchanged). */
CKPT__HIDDEN bool ckpt__name_table_grow(ckpt__name_table *table, size_t count);

/* Finds a name; returns its index or -1.  `names` as for insert. */
CKPT__HIDDEN int64_t ckpt__name_table_find(const ckpt__name_table *table, const char *const *names,
                                           size_t stride, const char *name);

#endif
