/* plan_internal.h — what the engine (load.c) sees of a plan. */
#ifndef CKPT_PLAN_INTERNAL_H
#define CKPT_PLAN_INTERNAL_H

#include "base/base.h"
#include "transform/elementwise.h"

typedef struct ckpt__plan_entry {
    ckpt_plan_item pub;
    /* The dtype the last cast rule matching this tensor asked for, whether
     * it applied or left the tensor as it was (a block type asked of a
     * tensor quantized already: ckpt does not requantize);
     * CKPT_DTYPE_INVALID when no cast rule matched it.  A conversion into a
     * format without block types dequantizes the blocks no rule asked a
     * block type of, and leaves those asked for to be refused by tensor
     * (ckpt_plan_dequantize_for). */
    ckpt_dtype asked;
    uint64_t *shape, *start, *count; /* output shape; source slice */
    uint32_t *perm;
    /* A row-major view of the source in other axes, and the permutation
     * of those axes (ckpt__plan_view_permute); view_ndim 0: none. */
    uint32_t view_ndim;
    uint64_t *view_shape;
    uint32_t *view_perm;
    /* The box of the view read (view axes): all of it, or, after a slice
     * of the source's axis 0 in whole indexes of the view's axis 0 (which
     * the view leaves first), those indexes — the same rows of the
     * output, so that a reader takes a viewed tensor a band at a time. */
    uint64_t *view_start, *view_count;
    bool selected;
    /* An output joined of several tensors (ckpt__plan_join): parts[k]
     * (catalog indexes, this entry's own among them) concatenated along
     * output axis join_axis, join_extent in all, part k's from
     * join_before[k] — along a new leading axis (stacked: join_axis 0,
     * one index a part), or along an existing one.  The output is pieces
     * (ckpt__plan_piece), each one engine move at its offset in the
     * output: each part once where no axis comes before the joined one
     * (join_lead 1), as its own entry reads it (slice, view); otherwise,
     * for each index of those axes (join_lead of them), each part's box
     * there: box k × ndim of join_boxes, from join_starts + lead × ndim.
     * Every part is cast to this entry's dtype.  absorbed: a part of
     * another entry's output, no output of its own. */
    size_t *parts;
    size_t part_count;
    bool absorbed, stacked;
    uint32_t join_axis;
    uint64_t join_extent, join_lead;
    uint64_t *join_before, *join_starts, *join_boxes;
    /* An output split along its leading axis (ckpt__plan_unstack): each
     * of its split_count slices one output of its own, named
     * split_names[k], the entry's shape less that axis; the k-th reads
     * the source box at split_starts + k × ndim (the source's axes), of
     * split_box's extents.  split_count 0: one output, the entry's. */
    const char **split_names;
    uint64_t *split_starts, *split_box;
    size_t split_count;
    /* An elementwise rule on the way out (ckpt__plan_compute); has_op
     * false: none. */
    ckpt__elementwise op;
    bool has_op;
    /* Where the output goes among the outputs (ckpt__plan_place): after
     * catalog entry place, in the order of placing (seq); seq 0: its own
     * place. */
    size_t place;
    uint64_t seq;
    void *buffer;        /* the caller's, when set */
    uint64_t capacity;
    struct ckpt_device *device; /* buffer is that device's memory (ckpt_device.h), or NULL */
    void *owned;         /* allocated by the library */
} ckpt__plan_entry;

/* Why a broad rule left a tensor as it was (ckpt_plan_last_rule_skipped). */
typedef enum ckpt__skip {
    CKPT__SKIP_NOT_FLOAT,       /* a float cast, or quantization, of an integer or bool tensor */
    CKPT__SKIP_NOT_INTEGER,     /* an integer widening of a float tensor */
    CKPT__SKIP_VECTOR,          /* quantization of a tensor of fewer than 2 axes */
    CKPT__SKIP_PARTIAL_BLOCKS,  /* quantization of rows that are not whole blocks */
    CKPT__SKIP_LAST_AXIS_MOVED, /* quantization of a tensor whose last axis an earlier rule moved */
    CKPT__SKIP_QUANTIZED,       /* quantization of a tensor quantized already */
    CKPT__SKIP_BLOCK_TO_INTEGER,/* an integer cast of a quantized tensor */
    CKPT__SKIP_NO_DIMENSION,    /* a slice of a dimension the tensor lacks */
    CKPT__SKIP_PACKED,          /* a slice of packed sub-byte elements */
    CKPT__SKIP_RANK,            /* a permutation of a tensor with another number of axes */
    CKPT__SKIP_COUNT
} ckpt__skip;

/* An output no source tensor holds (ckpt__plan_generate): its bytes, made
 * from values. */
typedef struct ckpt__plan_generated {
    const char *name;
    ckpt_dtype dtype;
    uint32_t ndim;
    const uint64_t *shape;
    const void *data;
    uint64_t nbytes;
} ckpt__plan_generated;

struct ckpt_plan {
    ckpt_catalog *catalog;
    ckpt__arena arena;
    ckpt__plan_entry *entries; /* one per catalog tensor */
    size_t entry_count;
    bool selecting;            /* a select call replaced "everything" */
    struct ckpt__plan_rule *rules; /* select and exclude patterns in order (arena), for names that are not tensors */
    size_t rule_count, rule_cap;
    unsigned flags;            /* CKPT_PLAN_* */
    size_t rule_matched, rule_skipped; /* the last rule's accounting */
    size_t skipped_for[CKPT__SKIP_COUNT]; /* …of its skipped tensors, by reason */
    const char *skip_example[CKPT__SKIP_COUNT]; /* the first tensor skipped for each */
    size_t *selected;          /* indexes of selected entries, in order */
    size_t selected_count;
    bool selection_dirty;
    ckpt__name_table names;    /* over selected items' names */
    bool names_dirty;
    ckpt_match_entry *matches;
    size_t match_count;
    ckpt_load_stats stats;
    struct ckpt_mapping **maps; /* private views' mappings, per data file (CKPT_VIEWS_PRIVATE) */
    /* What only a conversion writes (ckpt__plan_stack, _unstack,
     * _generate: assembled), and the elementwise rules a conversion or a
     * load applies (ckpt__plan_compute: computed): a load refuses an
     * assembled plan, a collective conversion both
     * (ckpt__plan_refuse_assembled). */
    ckpt__plan_generated *generated; /* before every selected entry, in order (arena) */
    size_t generated_count, generated_cap;
    uint64_t place_seq;        /* placings so far */
    bool assembled, computed;
    /* Outputs joined of several tensors along an existing axis
     * (ckpt__plan_join), which a load and a one-process conversion write,
     * a collective one does not. */
    bool joined;
    /* Files a conversion writes beside the tensors (GGUF → Hugging Face's
     * config.json): ckpt__plan_add_file; names and bytes in the arena. */
    struct ckpt__plan_file {
        const char *name;
        const void *data;
        size_t len;
    } *files;
    size_t file_count;
    /* The plan maps the source to another model's layout and made its
     * metadata into the output's own (a llama.cpp GGUF as a Hugging Face
     * model: config.json and the tokenizer's files, or, for a load, no
     * files at all), so that the source's entries, which describe the
     * source (general.file_type Q8_0 over f32 tensors, megabytes of
     * vocabulary), go to no tensor file of a conversion unless asked
     * (ckpt_writer_options.source_metadata).  Set by the mapping
     * (llamacpp_hf.c), not by what files it adds. */
    bool metadata_mapped;
    /* Key-values a conversion of this plan gives its output, in order
     * (llama.cpp's conversion: the GGUF key-values, in GGUF's encoding):
     * ckpt__plan_add_kv; keys and values in the arena. */
    ckpt__pairs kvs;
};

/* A select or exclude rule as given (pattern NULL: every name). */
typedef struct ckpt__plan_rule {
    const char *pattern;
    bool exclude;
} ckpt__plan_rule;

/* Whether the plan's select and exclude rules, applied in order as they
 * are to tensors, keep `name` (the dotted path of a value of the object
 * tree that is not a tensor). */
CKPT__HIDDEN bool ckpt__plan_selects_name(const ckpt_plan *plan, const char *name);

/* Refreshes the selection list (after select/exclude/prune). */
CKPT__HIDDEN void ckpt__plan_refresh(ckpt_plan *plan);

/* The float dtype of every selected float tensor when the plan's casts
 * changed some and left them all of one dtype; CKPT_DTYPE_INVALID when no
 * float tensor is cast, or the float tensors end up of several dtypes. */
CKPT__HIDDEN ckpt_dtype ckpt__plan_one_float_dtype(const ckpt_plan *plan);

/*
 * Reorders the elements of selected tensor `index` (a catalog index) as a
 * reshape to `shape` (ndim axes, the same elements), a permutation of those
 * axes (output axis i is axis perm[i]) and a reshape back: the tensor keeps
 * its shape, the engine moves its elements through the view (llama.cpp's
 * Q/K permutation splits rows into heads and halves and swaps the two).  The
 * last axis stays last (block casts cut it; a GGUF block type's rows, a
 * whole number of blocks, move as blocks).  Only for a tensor of whole-byte
 * elements or blocks stored as one dense piece, neither sliced nor permuted yet;
 * CKPT_E_INVALID_ARGUMENT naming it otherwise.
 */
CKPT__HIDDEN ckpt_status ckpt__plan_view_permute(ckpt_plan *plan, size_t index, uint32_t ndim, const uint64_t *shape,
                                                 const uint32_t *perm, ckpt_error *err);

/*
 * Outputs a conversion assembles, computes or generates — what llama.cpp's
 * convert_hf_to_gguf.py makes of a Hugging Face model beyond renames, casts
 * and permutations.  A conversion (ckpt_convert_plan) writes them,
 * streamed; a load or a collective conversion refuses the plan
 * (CKPT_E_UNSUPPORTED), except that a load applies an elementwise rule
 * (ckpt__plan_compute) as it reads the tensor, as a conversion does.
 *
 * ckpt__plan_join: selected entry `index` (a catalog index) becomes the
 * concatenation of the `n` tensors `parts` (catalog indexes, `index` among
 * them, in the output's order) along their axis `axis`, or, with `axis`
 * CKPT__PLAN_NEW_AXIS, their stack along a new leading axis (n × the
 * parts' shape: ckpt__plan_stack); in `index`'s dtype (a later cast of
 * `index` casts every part); the others leave the selection.  One engine
 * move per piece (ckpt__plan_piece) writes it at its offset in the
 * output, so that no part is held whole and no copy of the output is
 * made.  The parts must be plain selected tensors (neither stacked,
 * split, computed nor placed) of one source dtype of whole bytes or
 * blocks; stacked, each keeps its own slice and view, and their outputs
 * have one shape; joined along an existing axis, they are neither
 * sliced, permuted nor viewed, `axis` is one of theirs and their shapes
 * differ on it alone.  CKPT_E_INVALID_ARGUMENT naming the part otherwise.
 * A later slice or permutation of the output is refused.
 *
 * llama.cpp's conversion stacks an MoE model's experts, one tensor per
 * expert in a Hugging Face checkpoint, into one (a stack: only a
 * conversion writes it, a load refuses it as it refuses the plan's other
 * conversion-only outputs); the way back joins llama.cpp's two stacks
 * (experts, ff, hidden) along axis 1 into what transformers' MoE models
 * hold (Mixtral, Qwen2-MoE, Qwen3-MoE since transformers 5: every
 * expert's gate rows then its up rows, experts × 2·ff × hidden), which a
 * load writes too, into place; a collective load or conversion refuses
 * it (ckpt__plan_refuse_joined).
 */
#define CKPT__PLAN_NEW_AXIS UINT32_MAX
CKPT__HIDDEN ckpt_status ckpt__plan_join(ckpt_plan *plan, size_t index, size_t n, const size_t *parts, uint32_t axis,
                                         ckpt_error *err);
static inline ckpt_status ckpt__plan_stack(ckpt_plan *plan, size_t index, size_t n, const size_t *parts,
                                           ckpt_error *err) {
    return ckpt__plan_join(plan, index, n, parts, CKPT__PLAN_NEW_AXIS, err);
}

/* The engine moves selected entry `e`'s output is made of: one, or a
 * joined one's pieces (each part, for each index of the axes before the
 * joined one). */
static inline uint64_t ckpt__plan_pieces(const ckpt__plan_entry *e) {
    return e->part_count ? e->join_lead * e->part_count : 1;
}

/* What piece j of selected entry `e` reads, set in *m (its tensor,
 * start, count, perm and view; the rest left as it is): e's source as e
 * slices, permutes or views it, or a joined entry's part as the part's
 * entry reads it, or a box of it; and where the piece begins in e's
 * output, in bytes (*at). */
struct ckpt__move;
CKPT__HIDDEN void ckpt__plan_piece(const ckpt_plan *plan, const ckpt__plan_entry *e, uint64_t j, struct ckpt__move *m,
                                   uint64_t *at);

/*
 * ckpt__plan_unstack: selected entry `index` (a catalog index), a tensor of
 * `n` slices along its leading axis, becomes n outputs, the k-th named
 * names[k] (copied): slice k of that axis, of the tensor's other axes, in
 * the entry's dtype (a later cast of `index` casts every one) — what
 * llama.cpp's stacked experts are in a Hugging Face checkpoint, one 2-D
 * tensor per expert.  The reverse of a stack (ckpt__plan_join): one engine move per
 * output reads its slice, so the stacked tensor is never held whole.  The
 * entry must be a plain one of 2 or more axes of whole-byte elements or
 * blocks (whole rows a slice), neither sliced, permuted nor viewed yet,
 * with n the extent of its leading axis; CKPT_E_INVALID_ARGUMENT naming it
 * otherwise.  Its own name and item stay the stacked tensor's (ckpt_plan_item
 * shows it whole); only a conversion writes the outputs, each as a tensor
 * of the writer, in the entry's place.
 */
CKPT__HIDDEN ckpt_status ckpt__plan_unstack(ckpt_plan *plan, size_t index, size_t n, const char *const *names,
                                            ckpt_error *err);

/* CKPT_E_UNSUPPORTED naming `what` when the plan joins tensors. */
CKPT__HIDDEN ckpt_status ckpt__plan_refuse_joined(const ckpt_plan *plan, const char *what, ckpt_error *err);

/* The outputs selected entry `e` makes: its split's, else 1. */
static inline size_t ckpt__plan_outputs(const ckpt__plan_entry *e) { return e->split_count ? e->split_count : 1; }

/* Selected entry `index` gets the elementwise rule (each element widened
 * to float32, the rule applied, the result cast to the output's dtype),
 * applied by the engine's move of it: a conversion's, or a load's into the
 * entry's buffer (never a view of the file). */
CKPT__HIDDEN ckpt_status ckpt__plan_compute(ckpt_plan *plan, size_t index, const ckpt__elementwise *rule,
                                            ckpt_error *err);

/* Selected entry `index`'s output goes after that of catalog entry
 * `after` (and after those placed there before it) rather than at its own
 * place in catalog order. */
CKPT__HIDDEN void ckpt__plan_place(ckpt_plan *plan, size_t index, size_t after);

/* An output of `nbytes` bytes (`data`, copied) no source tensor holds,
 * named `name`, of that dtype and shape, before every selected entry (in
 * the order generated). */
CKPT__HIDDEN ckpt_status ckpt__plan_generate(ckpt_plan *plan, const char *name, ckpt_dtype dtype, uint32_t ndim,
                                             const uint64_t *shape, const void *data, uint64_t nbytes,
                                             ckpt_error *err);

/* CKPT_E_UNSUPPORTED naming `what` when the plan has stacked, split or
 * generated outputs, which only ckpt_convert_plan writes, or computed or
 * joined ones when the caller does not apply elementwise rules nor join
 * (`computes` false: a collective conversion; a load does both). */
CKPT__HIDDEN ckpt_status ckpt__plan_refuse_assembled(const ckpt_plan *plan, const char *what, bool computes,
                                                     ckpt_error *err);

/* A file a conversion of this plan writes into its output directory, with
 * the tensors' files and committed with them (name and bytes copied). */
CKPT__HIDDEN ckpt_status ckpt__plan_add_file(ckpt_plan *plan, const char *name, const void *data, size_t len,
                                             ckpt_error *err);

/* A key-value a conversion of this plan gives its output (after the
 * source's metadata; the writer puts it in place of a source's entry of
 * the same key; the plan's own keys are not checked for repeats, so a
 * caller adds each once): `value`
 * copied, its bytes (malloc'ed) taken over — freed here on failure. */
CKPT__HIDDEN ckpt_status ckpt__plan_add_kv(ckpt_plan *plan, const char *key, const ckpt__encoded *value,
                                           ckpt_error *err);

/* Gives entry `index` (a catalog index) the name `name` (copied). */
CKPT__HIDDEN ckpt_status ckpt__plan_set_name(ckpt_plan *plan, size_t index, const char *name, ckpt_error *err);

/* Forgets what a load gave: frees library buffers, clears data pointers. */
CKPT__HIDDEN void ckpt__plan_release(ckpt_plan *plan);

/* Checks the plan before reading: new names are unique. */
CKPT__HIDDEN ckpt_status ckpt__plan_check(ckpt_plan *plan, ckpt_error *err);

/* The moves of a load (load.c): buffers for every selected entry (the
 * caller's, or allocated), or views where options allow and no_view[k]
 * (for the k-th selected entry; may be NULL) does not forbid; one move per
 * entry that is not a view, in selection order.  *moves is malloc'ed.  On
 * failure, buffers allocated are released. */
struct ckpt__move;
CKPT__HIDDEN ckpt_status ckpt__load_moves(ckpt_plan *plan, const ckpt_load_options *options, const bool *no_view,
                                          struct ckpt__move **moves, size_t *count, uint64_t *views,
                                          uint64_t *view_bytes, ckpt_error *err);

/* A conversion (convert.c): WRITER moves of the selected entries, in
 * selection order, writer_index the entry's tensor in the writer (after
 * the generated ones, each entry's outputs in turn): one per piece of an
 * entry (ckpt__plan_pieces), one per output of an unstacked one (*count
 * of them, malloc'ed); and the begun writer of ckpt_convert_plan,
 * the generated tensors then the selected entries declared in that order. */
CKPT__HIDDEN ckpt_status ckpt__convert_moves(const ckpt_plan *plan, struct ckpt__move **moves, size_t *count,
                                             ckpt_error *err);
CKPT__HIDDEN ckpt_status ckpt__convert_writer(ckpt_plan *plan, const char *dst_path, const ckpt_writer_options *options,
                                              ckpt_writer **out, ckpt_error *err);

#endif
