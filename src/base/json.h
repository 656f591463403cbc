/*
 * json.h — a strict JSON reader for checkpoint headers and indexes.
 *
 * Why not a library: ckpt needs the byte offset of every value (errors name
 * the offset in the file), exact unsigned 64-bit integers, and speed on
 * headers of tens of thousands of tensors; it parses into one flat node
 * array with strings in an arena (a handful of allocations per document).
 *
 * Grammar: RFC 8259, as serde_json accepts it: whitespace around the value,
 * no trailing commas, no comments, no lone surrogates, no raw control
 * characters in strings, nesting at most 128 deep.
 */
#ifndef CKPT_BASE_JSON_H
#define CKPT_BASE_JSON_H

#include "base.h"

typedef enum ckpt__json_kind {
    CKPT__JSON_NULL,
    CKPT__JSON_FALSE,
    CKPT__JSON_TRUE,
    CKPT__JSON_NUMBER,
    CKPT__JSON_STRING,
    CKPT__JSON_ARRAY,
    CKPT__JSON_OBJECT
} ckpt__json_kind;

/*
 * Nodes are stored in document order.  An array's elements, and an object's
 * alternating keys and values, follow it directly; `end` is the index just
 * past a node's subtree, so the next sibling of node i is node[i].end.
 * 24 bytes a node: a document of 2 bytes a value ("0,") costs 12 times its
 * size, which a caller with a budget charges (ckpt__json_parse_in).
 */
typedef struct ckpt__json_node {
    const char *str;     /* string: decoded, NUL-terminated, inside the text; number: raw text */
    uint32_t kind : 3;   /* ckpt__json_kind */
    uint32_t count : 29; /* elements of an array, members of an object */
    uint32_t end;
    uint32_t offset;     /* byte offset of the value in the text */
    uint32_t len;        /* bytes in str */
} ckpt__json_node;

typedef struct ckpt__json_doc {
    ckpt__json_node *nodes; /* malloc'ed */
    size_t count;
    ckpt__budget *budget;   /* what the nodes were charged to (ckpt__json_parse_in) */
    size_t charged;
} ckpt__json_doc;

/*
 * Parses `len` bytes (at most 4 GiB) in place: strings are decoded inside
 * `text` and NUL-terminated there (no copies), so `text` is modified and
 * must outlive the node strings.  On failure returns CKPT_E_INVALID_ARGUMENT
 * (not JSON) or CKPT_E_NO_MEMORY, with *error_offset the byte where parsing
 * failed and `why` a short reason; `text` is then unspecified.  It is the
 * pull reader below with the whole text as a window never refilled, and the
 * tree ckpt__json_pull_doc builds, so the two cannot differ; nesting is
 * followed without recursion.
 */
CKPT__HIDDEN ckpt_status ckpt__json_parse(char *text, size_t len, ckpt__json_doc *doc, size_t *error_offset,
                                          const char **why);
/* The same, charging the nodes to `budget` (released by ckpt__json_free):
 * CKPT_E_LIMIT when they would take more than it allows. */
CKPT__HIDDEN ckpt_status ckpt__json_parse_in(char *text, size_t len, ckpt__budget *budget, ckpt__json_doc *doc,
                                             size_t *error_offset, const char **why);
CKPT__HIDDEN void ckpt__json_free(ckpt__json_doc *doc);

/* A number that is a non-negative integer fitting in 64 bits, as serde's
 * u64 accepts (no sign, fraction or exponent). */
CKPT__HIDDEN bool ckpt__json_u64(const ckpt__json_node *node, uint64_t *value);

/* The value of member `key` of node i when it is an object, else 0 (node
 * 0 is never a member's value). */
CKPT__HIDDEN uint32_t ckpt__json_member(const ckpt__json_doc *doc, uint32_t i, const char *key);

/* ---- pull reading: a document larger than its memory ------------------- */

/*
 * The same grammar read value by value through a window that a callback
 * refills from the document (a file of any size read with memory bounded
 * by its longest token): each call returns the next event — a scalar, the
 * start or end of an array or object — with the key of an object member,
 * the decoded string or the number's text, and the byte offset in the
 * document.  Strings are decoded in the window; an event's strings live
 * until the next call.  Nesting is kept in the reader (at most 128 deep).
 * For a small part of a large document, ckpt__json_pull_doc makes the node
 * tree of one value.
 */

/* Reads up to `cap` bytes at `offset` of the document into `buf` (*got:
 * how many; 0 only past the end).  A failure's status is returned as the
 * reader's, the callback having described it. */
typedef ckpt_status (*ckpt__json_fill)(void *user, uint64_t offset, char *buf, size_t cap, size_t *got);

typedef enum ckpt__json_step {
    CKPT__JSON_VALUE, /* a scalar, or the start of an array or object */
    CKPT__JSON_END,   /* the end of the innermost open array or object */
    CKPT__JSON_DONE   /* past the document's value (and its trailing whitespace) */
} ckpt__json_step;

typedef struct ckpt__json_event {
    ckpt__json_step step;
    ckpt__json_kind kind;  /* VALUE: the value's; END: ARRAY or OBJECT */
    const char *key;       /* an object member's key (decoded, NUL-terminated), else NULL */
    size_t key_len;
    uint64_t key_offset;
    const char *str;       /* a string (decoded, NUL-terminated) or a number's text */
    size_t len;
    uint64_t offset;       /* the value's first byte (END: its closing bracket) */
    size_t depth;          /* arrays and objects open around the value */
} ckpt__json_event;

enum { CKPT__JSON_MAX_DEPTH = 128 };

typedef struct ckpt__json_pull {
    char *win;             /* the window: bytes [base, base + len) of the document */
    size_t cap, len, pos;
    uint64_t base, size;
    ckpt__json_fill fill;
    void *user;
    bool in_place;         /* the window is a whole text in memory (ckpt__json_parse): never refilled */
    size_t depth;          /* arrays and objects open */
    uint64_t objects[CKPT__JSON_MAX_DEPTH / 64]; /* bit d: the one open at depth d is an object */
    const char *key;       /* the pending member's key (NULL: none): in the window read in place, else key_copy */
    size_t key_len;
    uint64_t key_offset;
    ckpt__buf key_copy;
    int state;
    struct ckpt__json_tree *tree; /* a tree being built from it: room made where each key and value starts */
    const char *why;       /* a syntax error's reason */
    uint64_t error_offset; /* …and where */
} ckpt__json_pull;

/* A reader of a document of `size` bytes (at most 4 GiB) through a window
 * of `window` bytes to start with (it grows to hold a longer token). */
CKPT__HIDDEN ckpt_status ckpt__json_pull_init(ckpt__json_pull *r, uint64_t size, size_t window, ckpt__json_fill fill,
                                              void *user);
/* The next event.  CKPT_E_INVALID_ARGUMENT: not JSON, r->why at
 * r->error_offset; CKPT_E_NO_MEMORY; or the fill's status. */
CKPT__HIDDEN ckpt_status ckpt__json_pull_next(ckpt__json_pull *r, ckpt__json_event *ev);
/* Reads past the rest of the value whose VALUE event was `ev` (nothing for
 * a scalar). */
CKPT__HIDDEN ckpt_status ckpt__json_pull_skip(ckpt__json_pull *r, const ckpt__json_event *ev);
CKPT__HIDDEN void ckpt__json_pull_free(ckpt__json_pull *r);

/*
 * The value whose VALUE event was `ev`, read on into a node tree (node 0 is
 * the value; offsets are the document's, so at most 4 GiB; strings copied
 * into `strings`).  `take`, when not NULL, is asked at each VALUE event
 * inside it, with the key of the object member the event is inside (or
 * NULL): when it returns true it has read that value itself (through the
 * reader, ckpt__json_pull_skip at least), and the tree holds an empty
 * array or object (or the scalar) in its place.  A failing take returns its
 * status through *take_status and stops the reading.
 */
typedef bool (*ckpt__json_take)(void *user, ckpt__json_pull *r, const ckpt__json_event *ev, const char *parent_key,
                                ckpt_status *take_status);
CKPT__HIDDEN ckpt_status ckpt__json_pull_doc(ckpt__json_pull *r, const ckpt__json_event *ev, ckpt__arena *strings,
                                             ckpt__json_take take, void *user, ckpt__json_doc *doc);

/* ---- output (ckpt__buf lives in base) -------------------------------- */

/* A JSON string as serde_json writes it: UTF-8 kept, `"` and `\` escaped,
 * \b \t \n \f \r, other control characters as \u00XX (lower-case hex). */
CKPT__HIDDEN void ckpt__buf_json_string(ckpt__buf *b, const char *s);
/* The same for `len` bytes (a NUL among them as \u0000). */
CKPT__HIDDEN void ckpt__buf_json_string_n(ckpt__buf *b, const char *s, size_t len);

/* A float as Python's repr writes it: the shortest digits that read back as
 * the same double (0.1, not 0.10000000000000001), "1.0" for integral values;
 * nan and ±inf, which JSON has not, as the object tree's marker
 * {"__float__": "nan"}. */
CKPT__HIDDEN void ckpt__buf_json_float(ckpt__buf *b, double f);

/* A JSON string as Python's json.dump writes it (ensure_ascii=True):
 * everything outside printable ASCII as \uXXXX (surrogate pairs above
 * U+FFFF). */
CKPT__HIDDEN void ckpt__buf_json_string_ascii(ckpt__buf *b, const char *s);

#endif
