/*
 * value.h — the object tree as values: what torch.load returns from a
 * pickle (dicts with their keys' types and order, tuples, sets, bytes, big
 * ints, the reconstructor calls of allowed globals, tensors by name), a
 * Flax document's nested maps, a DCP checkpoint's state dict.  Readers
 * build it, plans filter it (tree.c), writers walk it; JSON is written
 * (ckpt__value_json) only where a caller asks for text, and read
 * (ckpt__value_from_json) only where text comes in: a tree a converted file
 * recorded in its metadata, a tree a caller passes.
 *
 * Values live in an arena and are never freed alone.  Every walk of a tree
 * keeps its levels on a heap stack (ckpt__stack): a tree may nest as deep
 * as its reader allowed, whatever the thread's stack.
 *
 * The JSON of each kind (the schema of ckpt_catalog_tree_json):
 *   NULL, BOOL, INT, FLOAT, STR   null, true, 1, 1.0 (nan: {"__float__": "nan"}), "s"
 *   NUMBER                        a JSON number kept as it was written
 *   BYTES, BIGINT                 {"__bytes__": "<hex>"}, {"__int_le__": "<hex>"}
 *   LIST                          [a, b]
 *   TUPLE, SET                    {["__class__": cls, ]"__tuple__": [...]}, {"__set__": [...]}
 *   DICT                          {["__class__": cls, ]"__dict__": [[k, v], ...][, "__state__": s]}
 *   CALL                          {"__call__": cls, "args": [...][, "state": s]}
 *   GLOBAL                        {"__global__": "module.name"}
 *   TENSOR                        {"__tensor__": "name"}
 *   OBJECT                        {"key": value, ...}: any other JSON object
 */
#ifndef CKPT_BASE_VALUE_H
#define CKPT_BASE_VALUE_H

#include "base.h"
#include "json.h"

typedef enum ckpt__value_kind {
    CKPT__V_NULL,
    CKPT__V_BOOL,
    CKPT__V_INT,
    CKPT__V_FLOAT,
    CKPT__V_NUMBER, /* text: a JSON number neither an int64 nor a double reads back as written */
    CKPT__V_STR,    /* text: UTF-8 */
    CKPT__V_BYTES,  /* text: the bytes */
    CKPT__V_BIGINT, /* text: little-endian two's complement bytes */
    CKPT__V_TENSOR, /* text: the tensor's name */
    CKPT__V_GLOBAL, /* text: "module.name" */
    CKPT__V_LIST,   /* items */
    CKPT__V_TUPLE,  /* items; cls: "torch.Size" or NULL */
    CKPT__V_SET,    /* items */
    CKPT__V_CALL,   /* items: the args; cls: the callable, "module.name"; state */
    CKPT__V_DICT,   /* count pairs: items alternate key (a scalar), value; cls: "collections.OrderedDict" or NULL; state */
    CKPT__V_OBJECT, /* count pairs: items alternate key (a STR), value */
} ckpt__value_kind;

typedef struct ckpt_value ckpt__value; /* the public handle (ckpt.h) */
struct ckpt_value {
    uint8_t kind;
    uint32_t count;     /* containers: items (DICT, OBJECT: pairs) */
    const char *cls;    /* TUPLE, DICT: the class torch.load gives back, or NULL; CALL: the callable */
    ckpt__value *state; /* DICT, CALL: the state BUILD gave, or NULL */
    union {
        bool b;
        int64_t i;
        double f;
        struct {
            const char *data; /* NUL-terminated */
            size_t len;
        } s;
        ckpt__value **items;
    } u;
};

/* A value of `kind` in `arena`; a container with room for `count` items
 * (DICT, OBJECT: pairs), all NULL to be filled.  NULL when out of memory. */
CKPT__HIDDEN ckpt__value *ckpt__value_new(ckpt__arena *arena, ckpt__value_kind kind, size_t count);
/* A text kind (STR, BYTES, BIGINT, TENSOR, GLOBAL, NUMBER): `len` bytes copied. */
CKPT__HIDDEN ckpt__value *ckpt__value_text(ckpt__arena *arena, ckpt__value_kind kind, const char *s, size_t len);
/* The bytes of arena memory a value of `kind` with `count` items and `len`
 * bytes of text takes: what a reader charges to its budget. */
CKPT__HIDDEN size_t ckpt__value_cost(ckpt__value_kind kind, size_t count, size_t len);

/* Whether a value is a container (it has items). */
static inline bool ckpt__value_is_container(const ckpt__value *v) { return v->kind >= CKPT__V_LIST; }
/* Pair i of a DICT or OBJECT. */
static inline ckpt__value *ckpt__value_key(const ckpt__value *v, size_t i) { return v->u.items[2 * i]; }
static inline ckpt__value *ckpt__value_at(const ckpt__value *v, size_t i) { return v->u.items[2 * i + 1]; }
/* The value of OBJECT member `key`, or NULL. */
CKPT__HIDDEN ckpt__value *ckpt__value_member(const ckpt__value *v, const char *key);

/* Appends the JSON text of `v` (the schema above) to `b`. */
CKPT__HIDDEN void ckpt__value_json(ckpt__buf *b, const ckpt__value *v);
/* The same, malloc'ed and NUL-terminated; NULL when out of memory. */
CKPT__HIDDEN char *ckpt__value_json_text(const ckpt__value *v);

/*
 * The value of node 0 of a parsed JSON document, in `arena`: the objects
 * of the schema above become their kinds when they have exactly its shape
 * (so that the value writes back the same text), other objects OBJECT.
 * `how`: CKPT__VALUE_AS_READ, or CKPT__VALUE_RAW for a reader that turns
 * them into its own types (GGUF's typed values): every number a NUMBER as
 * written (no INT-or-FLOAT decision each), strings not copied (the
 * document's text, decoded in place, must then live as long as the
 * values).  What it takes is charged to the arena's budget (CKPT_E_LIMIT
 * beyond it, naming `path`); CKPT_E_NO_MEMORY.
 */
typedef enum ckpt__value_how { CKPT__VALUE_AS_READ, CKPT__VALUE_RAW } ckpt__value_how;
CKPT__HIDDEN ckpt_status ckpt__value_from_doc(ckpt__arena *arena, const ckpt__json_doc *doc, ckpt__value_how how,
                                              ckpt__value **out, ckpt_error *err, const char *path);
/* The same from JSON text (not changed); CKPT_E_INVALID_ARGUMENT when it
 * is not JSON, naming the byte. */
CKPT__HIDDEN ckpt_status ckpt__value_from_json(ckpt__arena *arena, const char *text, ckpt__value **out,
                                               ckpt_error *err, const char *path);

#endif
