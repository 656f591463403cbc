/*
 * pickle.h — a restricted, non-executing pickle reader (protocols 0–5 as
 * far as state dicts use them; CPython Lib/pickle.py and pickletools.py).
 *
 * The reader builds a tree of values; it never calls anything.  A GLOBAL or
 * STACK_GLOBAL is checked against the caller's allowlist the moment it is
 * read; REDUCE, NEWOBJ and NEWOBJ_EX apply only to allowed globals and
 * produce CALL nodes (a few container constructors are understood:
 * collections.OrderedDict() is a dict, builtins.set/frozenset(list) a set,
 * torch.Size(tuple) a tuple (both typed so: ckpt__pk_type), _codecs.encode(str, "latin1") and
 * builtins.bytearray(bytes) are bytes); BUILD only attaches state to a CALL
 * or a dict.  INST, OBJ, EXT*, out-of-band buffers and the protocol-0 text
 * opcodes other than GLOBAL are refused.  The reader does not recurse; every
 * length is checked against the input and the memo and stack are bounded,
 * so memory stays proportional to the pickle's size.  Trees may share
 * nodes (the memo) and even contain cycles: walkers must bound their depth.
 */
#ifndef CKPT_FORMATS_PICKLE_H
#define CKPT_FORMATS_PICKLE_H

#include "../base/base.h"

typedef enum ckpt__pk_kind {
    CKPT__PK_NONE,
    CKPT__PK_BOOL,
    CKPT__PK_INT,    /* fits int64 */
    CKPT__PK_BIGINT, /* longer: little-endian two's complement bytes in str */
    CKPT__PK_FLOAT,
    CKPT__PK_STR,    /* UTF-8, NUL-terminated */
    CKPT__PK_BYTES,
    CKPT__PK_TUPLE,
    CKPT__PK_LIST,
    CKPT__PK_DICT, /* items alternate key, value */
    CKPT__PK_SET,
    CKPT__PK_GLOBAL,
    CKPT__PK_CALL,   /* callable(args) or callable.__new__(args), not executed */
    CKPT__PK_PERSID, /* a persistent id (torch: a storage reference) */
    CKPT__PK_MARK    /* internal: never in a finished tree */
} ckpt__pk_kind;

/* The class behind a container that the reader understood as a plain one
 * (torch.load gives the class back; a writer pickles it so again). */
typedef enum ckpt__pk_type {
    CKPT__PK_PLAIN = 0,
    CKPT__PK_ORDERED_DICT, /* DICT: collections.OrderedDict() */
    CKPT__PK_TORCH_SIZE,   /* TUPLE: torch.Size(tuple) */
} ckpt__pk_type;

typedef struct ckpt__pk_value ckpt__pk_value;
/* 40 bytes: a pickle makes one for most opcodes (a .metadata of 16 MB
 * holds 3.5 million). */
struct ckpt__pk_value {
    uint8_t kind;
    bool newobj;     /* CALL: made by NEWOBJ(_EX) rather than REDUCE */
    uint8_t type;    /* ckpt__pk_type: the class a DICT or TUPLE was made by */
    uint32_t offset; /* byte of the opcode that made it, in the pickle (pickles are read below 4 GiB) */
    union {
        bool b;
        int64_t i;
        double f;
        struct {
            const char *data;
            size_t len;
        } s; /* STR, BYTES, BIGINT */
        struct {
            ckpt__pk_value **items;
            uint32_t count, cap;
        } seq; /* TUPLE, LIST, SET, DICT */
        struct {
            const char *module, *name;
            bool state_only; /* CKPT__PK_ALLOW_STATE */
        } global;
        struct {
            ckpt__pk_value *callable; /* a GLOBAL */
            ckpt__pk_value *args;     /* a TUPLE */
            ckpt__pk_value *kwargs;   /* NEWOBJ_EX, else NULL */
        } call;
        ckpt__pk_value *pid;
    } u;
    ckpt__pk_value *state; /* BUILD's argument, else NULL */
};

/* What an allowlist says of a global: refused; allowed (torch's own list:
 * REDUCE and NEWOBJ apply to it); or allowed to rebuild objects only —
 * NEWOBJ of it as a class, then BUILD with its state, or REDUCE if it is
 * one of the plain-data reconstructors (numpy scalars and dtypes) — what a
 * caller's extra allowed globals get. */
typedef enum ckpt__pk_allowed { CKPT__PK_DENY = 0, CKPT__PK_ALLOW = 1, CKPT__PK_ALLOW_STATE = 2 } ckpt__pk_allowed;

typedef ckpt__pk_allowed (*ckpt__pk_allow_fn)(const char *module, const char *name, void *user);

typedef struct ckpt__pk_source {
    const char *path;     /* for errors: the file */
    const char *entry;    /* for errors: the record in it ("archive/data.pkl"), or NULL */
    uint64_t file_offset; /* where the pickle starts in the file, for error offsets */
} ckpt__pk_source;

/*
 * Reads one pickle from `data` (`len` bytes) up to its STOP; *consumed
 * receives the bytes read (legacy torch files hold several pickles back to
 * back).  Values and strings go to `arena`.  Errors: CKPT__D(PICKLE_INVALID)
 * (malformed, truncated, stack misuse), CKPT__D(PICKLE_FORBIDDEN) (naming the
 * global or the opcode), CKPT_E_LIMIT, CKPT_E_NO_MEMORY; the error offset is
 * the opcode's byte in the file.
 */
CKPT__HIDDEN ckpt_status ckpt__pk_load(const unsigned char *data, size_t len, const ckpt__pk_source *src,
                                       ckpt__pk_allow_fn allow, void *user, ckpt__arena *arena,
                                       ckpt__pk_value **out, size_t *consumed, ckpt_error *err);

/* True when a value is the GLOBAL module.name. */
CKPT__HIDDEN bool ckpt__pk_is_global(const ckpt__pk_value *v, const char *module, const char *name);

#endif
