/* convert.c — ckpt_convert and ckpt_convert_plan: a plan's tensors into a
 * new checkpoint, through the engine (engine.c) into a writer (writer.c).
 *
 * A conversion is a plan: ckpt_convert is the identity plan.  What
 * huggingface_hub's save_torch_state_dict does to a state dict holds under
 * any rule: tensors that share a torch storage are declared with where
 * they lie in it, and the writer keeps one of each overlapping group
 * (recording `removed → kept`); every file of a torch source gets
 * {"format": "pt"}; the object tree of a torch file is kept (unless it
 * is a state dict: tree_internal.h) under CKPT_TREE_METADATA_KEY, true to
 * the plan's selection and renames, and so is the tree a converted file
 * records there (a torch output writes it as its object); a Flax msgpack
 * source gets {"format": "flax"} and its structure under CKPT_STRUCTURE_METADATA_KEY.
 * Tensors needing no conversion are copied by the kernel. */
#include <stdlib.h>
#include <string.h>

#include "catalog_internal.h"
#include "engine.h"
#include "formats/shards.h"
#include "formats/torch_save.h"
#include "plan_internal.h"
#include "tree_internal.h"
#include "writer_internal.h"

/* A source saved by torch: its files get {"format": "pt"}, as the hub
 * writes for a torch state dict, and its object tree is kept. */
static bool torch_source(const ckpt_catalog *c) {
    ckpt_format f = ckpt_catalog_format(c);
    return f == CKPT_FORMAT_TORCH || f == CKPT_FORMAT_TORCH_SHARDED || f == CKPT_FORMAT_DCP;
}

/* One safetensors file, without an index. */
static bool lone_safetensors(const ckpt_catalog *c) {
    return !ckpt_catalog_index_path(c) && ckpt_catalog_format(c) == CKPT_FORMAT_SAFETENSORS;
}

/* Whether a source's metadata entry is the checkpoint's own (the new
 * index's when the output is sharded, the file's when it is one file) rather
 * than every file's.  An index's own entries are (the hub's `removed →
 * kept`, a caller's metadata), a shard's are not.  A lone safetensors file
 * holds what save_torch_state_dict puts in an index when it shards: all but
 * the per-file keys ("format"), so re-sharding it gives the hub's index. */
static bool checkpoint_entry(const ckpt_catalog *c, const char *key) {
    if (ckpt_catalog_index_path(c)) {
        for (size_t f = 0; f < ckpt_catalog_file_count(c); f++)
            if (ckpt__pairs_get(ckpt__cat_file_metadata(c, f), key)) return false;
        return true;
    }
    return lone_safetensors(c) && !ckpt__shards_file_key(key);
}

/* A source's metadata entry, and the tensor it names when it is a lone
 * file's `removed → kept` (SIZE_MAX otherwise). */
typedef struct meta_entry {
    const char *key, *value;
    const ckpt__encoded *typed; /* a GGUF source's typed key-value, handed over encoded (value NULL) */
    size_t at, kept;
} meta_entry;

/* The order save_torch_state_dict gives the entries: the caller's first,
 * then `removed → kept` storage by storage, each storage's removed names
 * sorted.  A lone file has lost that order (safetensors writes its
 * `__metadata__` in a per-process hash order); an index keeps it. */
static int by_hub_order(const void *a, const void *b) {
    const meta_entry *x = a, *y = b;
    if (x->kept != y->kept) return x->kept == SIZE_MAX ? -1 : y->kept == SIZE_MAX ? 1 : x->kept < y->kept ? -1 : 1;
    if (x->kept != SIZE_MAX) return strcmp(x->key, y->key);
    return x->at < y->at ? -1 : x->at > y->at;
}

/* The object tree `tree` as the plan leaves it, handed to the writer
 * under `key` (none for what `rule` leaves unrecorded): as values for the
 * checkpoint's metadata, as text for every file's. */
static ckpt_status hand_tree(const ckpt_plan *p, ckpt_writer *w, const ckpt__value *tree, ckpt__tree_rule rule,
                             const char *key, bool own, ckpt_error *err) {
    ckpt__value *kept = NULL;
    ckpt_status st = ckpt__tree_for_plan(p, tree, rule, ckpt__writer_arena(w), &kept, err);
    if (st || !kept) return st;
    if (own) return ckpt__writer_set_tree(w, key, kept, err);
    char *text = ckpt__value_json_text(kept);
    st = text ? ckpt_writer_set_metadata(w, key, text, err) : ckpt__oom(err, NULL, "the object tree");
    free(text);
    return st;
}

/* A converted torch file's tree, recorded in its metadata: as this plan
 * leaves it, like the tree of the torch file itself (none for what is
 * left a state dict).  Text that is no tree ckpt reads is kept as it is. */
static ckpt_status hand_recorded_tree(const ckpt_plan *p, ckpt_writer *w, const char *key, const char *text,
                                      bool own, ckpt_error *err) {
    ckpt__value *tree;
    if (ckpt__value_from_json(ckpt__writer_arena(w), text, &tree, NULL, NULL) != CKPT_OK)
        return own ? ckpt_writer_set_checkpoint_metadata(w, key, text, err) : ckpt_writer_set_metadata(w, key, text, err);
    return hand_tree(p, w, tree, CKPT__TREE_UNLESS_STATE_DICT, key, own, err);
}

/* ckpt's digests of the source's own bytes and header: not the output's
 * (a cast, another layout, another header), which records its own when
 * asked (checksums).  Carried, they made a checksummed output hold the key
 * twice, and another one fail ckpt verify. */
static bool source_digests(const char *key) {
    return !strcmp(key, CKPT_CHECKSUM_METADATA_KEY) || !strcmp(key, CKPT_CHUNK_METADATA_KEY);
}

/* The source's metadata: {"format": "pt"} for torch sources, the source's
 * own map, and a torch file's object tree as the plan leaves it; none into
 * an output format that takes only its own (GGUF from safetensors) unless
 * the caller asks (writer option source_metadata, `asked`).
 *
 * A plan that maps the source to a Hugging Face model (a llama.cpp GGUF:
 * ckpt_gguf_hf_plan, and its tensors alone, ckpt_gguf_hf_plan_tensors)
 * has made the source's metadata into files of its own (config.json, the
 * tokenizer's) or into none: its safetensors hold what transformers'
 * save_pretrained writes, {"format": "pt"}, and no copy of the
 * key-values, which were megabytes of vocabulary and merges in every
 * file's header, and false there (general.file_type Q8_0 over bf16
 * tensors).  Asked, they are carried. */
static ckpt_status copy_metadata(const ckpt_plan *p, ckpt_writer *w, bool asked, ckpt_error *err) {
    const ckpt_catalog *c = p->catalog;
    ckpt_status st = CKPT_OK;
    if (p->metadata_mapped) {
        st = ckpt_writer_set_metadata(w, "format", "pt", err);
        if (st || !asked) return st;
    }
    if (!ckpt__writer_takes_metadata_of(w, ckpt_catalog_format(c))) return CKPT_OK; /* foreign to GGUF, unasked */
    if (torch_source(c)) {
        st = ckpt_writer_set_metadata(w, "format", "pt", err);
        if (st == CKPT_OK)
            st = hand_tree(p, w, ckpt_catalog_tree(c), CKPT__TREE_UNLESS_STATE_DICT, CKPT_TREE_METADATA_KEY, true, err);
    }
    if (ckpt_catalog_format(c) == CKPT_FORMAT_FLAX_MSGPACK) {
        /* As transformers' Flax models save safetensors; the document's
         * structure where ckpt.save keeps one (dicts keyed "0", "1" stay
         * dicts; step counters and hyper-parameters are kept). */
        st = ckpt_writer_set_metadata(w, "format", "flax", err);
        if (st == CKPT_OK)
            st = hand_tree(p, w, ckpt_catalog_tree(c), CKPT__TREE_UNLESS_SPLIT_NAMES, CKPT_STRUCTURE_METADATA_KEY, true, err);
    }
    size_t n = ckpt_catalog_metadata_count(c);
    meta_entry *order = st == CKPT_OK ? ckpt__malloc((n ? n : 1) * sizeof *order) : NULL;
    if (st == CKPT_OK && !order) st = ckpt__oom(err, NULL, "the source's metadata");
    const ckpt__pairs *meta = ckpt__cat_metadata(c);
    for (size_t i = 0; st == CKPT_OK && i < n; i++) {
        order[i] = (meta_entry){.key = meta->keys[i], .typed = ckpt__pairs_value(meta, i), .at = i, .kept = SIZE_MAX};
        if (!order[i].typed) order[i].value = meta->values[i];
        const ckpt_tensor_info *kept = lone_safetensors(c) ? ckpt_catalog_find(c, order[i].value) : NULL;
        if (kept && !ckpt_catalog_find(c, order[i].key)) order[i].kept = ckpt__catalog_index_of(c, kept);
    }
    if (st == CKPT_OK) qsort(order, n, sizeof *order, by_hub_order);
    for (size_t i = 0; st == CKPT_OK && i < n; i++) {
        const char *key = order[i].key, *value = order[i].value;
        bool own = checkpoint_entry(c, key);
        if (source_digests(key))
            continue;
        if (order[i].typed)
            st = ckpt__writer_set_metadata_value(w, key, order[i].typed, own, err);
        else if (!strcmp(key, CKPT_TREE_METADATA_KEY) && !ckpt_catalog_tree(c))
            st = hand_recorded_tree(p, w, key, value, own, err);
        else
            st = own ? ckpt_writer_set_checkpoint_metadata(w, key, value, err) : ckpt_writer_set_metadata(w, key, value, err);
    }
    free(order);
    return st;
}

/* Where an entry's output lies in its source storage, for deduplication:
 * only a whole tensor whose bytes the plan does not move (a cast changes
 * every element alike, so views stay views) shares its storage. */
static bool storage_of(const ckpt_plan *p, const ckpt__plan_entry *e, ckpt_tensor_storage *s) {
    const ckpt_tensor_info *t = e->pub.source;
    uint64_t base, size;
    if (e->part_count || e->split_count || e->has_op) return false; /* assembled, split or computed: its own bytes */
    if (!torch_source(p->catalog) || !ckpt__catalog_storage(p->catalog, t->storage, &base, &size) || !size) return false;
    for (uint32_t d = 0; d < t->ndim; d++)
        if (e->count[d] != t->shape[d] || e->perm[d] != d) return false;
    unsigned in = ckpt_dtype_bits(t->dtype), out = ckpt_dtype_bits(e->pub.dtype);
    if (in % 8 || out % 8 || !in || !out) return false; /* packed or block types: never shared */
    uint64_t begin = t->offset - base, end = begin;
    if (t->numel) {
        uint64_t last = 0; /* the row-major last element, as the hub's _end_ptr */
        for (uint32_t d = 0; d < t->ndim; d++) last += (t->shape[d] - 1) * (uint64_t)(t->strides ? t->strides[d] : 0);
        end = t->strides ? begin + (last + 1) * (in / 8) : begin + t->nbytes;
    }
    /* Different output dtypes are different storages; sizes scale with
     * the element. */
    *s = (ckpt_tensor_storage){
        .id = ((uint64_t)t->storage + 1) * CKPT_DTYPE_COUNT + (uint64_t)e->pub.dtype,
        .nbytes = size / (in / 8) * (out / 8),
        .begin = begin / (in / 8) * (out / 8),
        .end = end / (in / 8) * (out / 8),
        .contiguous = !t->strides,
    };
    return true;
}

/* Piece j of entry `e`'s output (ckpt__plan_piece: its own source, or a
 * part of a joined one), into the writer's tensor `writer_index`. */
static ckpt__move piece_move(const ckpt_plan *p, const ckpt__plan_entry *e, uint64_t j, size_t writer_index) {
    ckpt__move m = {.dtype = e->pub.dtype, .name = e->pub.name, .sink = CKPT__SINK_WRITER,
                    .writer_index = writer_index, .op = e->has_op ? &e->op : NULL};
    ckpt__plan_piece(p, e, j, &m, &m.writer_at);
    return m;
}

/* The move of output k of entry `e`, split along its leading axis
 * (ckpt__plan_unstack): its slice of the source, into the writer's tensor
 * `writer_index`. */
static ckpt__move split_move(const ckpt_plan *p, const ckpt__plan_entry *e, size_t k, size_t writer_index) {
    ckpt__move m = piece_move(p, e, 0, writer_index);
    m.start = e->split_starts + k * e->pub.source->ndim, m.count = e->split_box;
    m.name = e->split_names[k];
    return m;
}

ckpt_status ckpt__convert_moves(const ckpt_plan *p, ckpt__move **out, size_t *count, ckpt_error *err) {
    size_t n = 0;
    for (size_t k = 0; k < p->selected_count; k++) {
        const ckpt__plan_entry *e = &p->entries[p->selected[k]];
        n += e->split_count ? e->split_count : (size_t)ckpt__plan_pieces(e);
    }
    ckpt__move *moves = ckpt__calloc(n ? n : 1, sizeof *moves);
    if (!moves) return ckpt__oom(err, NULL, "the conversion's tensors");
    size_t m = 0, writer_index = p->generated_count;
    for (size_t k = 0; k < p->selected_count; k++, writer_index++) {
        const ckpt__plan_entry *e = &p->entries[p->selected[k]];
        for (size_t j = 0; j < e->split_count; j++) moves[m++] = split_move(p, e, j, writer_index + j);
        if (e->split_count) {
            writer_index += e->split_count - 1;
            continue;
        }
        /* one, or a joined entry's pieces at their offsets, in the
         * output's order */
        for (uint64_t j = 0; j < ckpt__plan_pieces(e); j++) moves[m++] = piece_move(p, e, j, writer_index);
    }
    *out = moves, *count = m;
    return CKPT_OK;
}

/* The generated tensors' bytes, written whole (they are small: made from
 * values). */
static ckpt_status write_generated(const ckpt_plan *p, ckpt_writer *w, ckpt_error *err) {
    ckpt_status st = CKPT_OK;
    for (size_t g = 0; st == CKPT_OK && g < p->generated_count; g++)
        if (p->generated[g].nbytes && !ckpt_writer_tensor_kept(w, g))
            st = ckpt__writer_pwrite(w, g, 0, p->generated[g].data, (size_t)p->generated[g].nbytes, err);
    return st;
}

ckpt_status ckpt__convert_writer(ckpt_plan *p, const char *dst_path, const ckpt_writer_options *options,
                                 ckpt_writer **out, ckpt_error *err) {
    *out = NULL;
    ckpt_writer_options o;
    ckpt_writer_options_init(&o);
    if (options) CKPT__TAKE_OPTIONS(&o, options);
    o.size = sizeof o;
    o.copy_partial_views = 1; /* a torch file's views are written, each whole, where the hub would refuse */
    /* An index that counted parameters (transformers' save_pretrained)
     * gets an index that counts them. */
    if (ckpt__cat_index_counts_parameters(p->catalog)) o.total_parameters = 1;
    ckpt_writer *w;
    ckpt_status st = ckpt_writer_create(dst_path, &o, &w, err);
    if (st) return st;
    if (ckpt__catalog_io(p->catalog) == CKPT_IO_DIRECT) ckpt__writer_drop_behind(w);
    /* A model directory's config.json says the dtype the casts gave every
     * float tensor; with several float dtypes left, it stays as it was. */
    const char *config_dtype = ckpt__torch_dtype_name(ckpt__plan_one_float_dtype(p));
    if (o.copy_files_from && config_dtype) ckpt__writer_set_config_dtype(w, config_dtype);
    st = copy_metadata(p, w, o.source_metadata != 0, err);
    for (size_t i = 0; st == CKPT_OK && i < p->kvs.count; i++) /* the conversion's own (llama.cpp's) */
        st = ckpt__writer_override_metadata_value(w, p->kvs.keys[i], ckpt__pairs_value(&p->kvs, i), err);
    for (size_t g = 0; st == CKPT_OK && g < p->generated_count; g++) {
        const ckpt__plan_generated *t = &p->generated[g];
        st = ckpt_writer_add_tensor_shared(w, t->name, t->dtype, t->ndim, t->shape, NULL, NULL, err);
    }
    if (st == CKPT_OK && (p->assembled || p->computed) && ckpt__writer_needs_order(w))
        st = ckpt__fail(err, CKPT_E_UNSUPPORTED, dst_path, NULL, -1,
                        "this output checks each tensor's bytes in order, which a plan that stacks, splits, computes "
                        "or generates tensors does not write");
    for (size_t i = 0; st == CKPT_OK && i < p->file_count; i++)
        st = ckpt__writer_add_file(w, p->files[i].name, p->files[i].data, p->files[i].len, err);
    for (size_t k = 0; st == CKPT_OK && k < p->selected_count; k++) {
        ckpt__plan_entry *e = &p->entries[p->selected[k]];
        ckpt_tensor_storage s;
        bool shared = storage_of(p, e, &s);
        for (size_t j = 0; st == CKPT_OK && j < e->split_count; j++) /* a split's outputs, each its slice */
            st = ckpt_writer_add_tensor_shared(w, e->split_names[j], e->pub.dtype, e->pub.ndim - 1, e->pub.shape + 1,
                                               NULL, NULL, err);
        if (st == CKPT_OK && !e->split_count)
            st = ckpt_writer_add_tensor_shared(w, e->pub.name, e->pub.dtype, e->pub.ndim, e->pub.shape,
                                               shared ? &s : NULL, NULL, err);
    }
    if (st == CKPT_OK) st = ckpt_writer_begin(w, err);
    if (st) {
        ckpt_writer_free(w);
        return st;
    }
    *out = w;
    return CKPT_OK;
}

/* Creates the writer for a plan's output (a dry run's with `dry_run`),
 * declares every selected tensor and begins: *moves_out holds the moves of
 * the tensors the writer keeps (*used_out of them). */
static ckpt_status declare(ckpt_plan *p, const char *dst_path, const ckpt_writer_options *options, bool dry_run,
                           ckpt_writer **w_out, ckpt__move **moves_out, size_t *used_out, ckpt_error *err) {
    *w_out = NULL, *moves_out = NULL, *used_out = 0;
    if (!p || !dst_path)
        return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, NULL, NULL, -1, "plan and destination are required");
    ckpt_status st = ckpt__plan_check(p, err);
    if (st) return st;
    ckpt_writer_options o;
    ckpt_writer_options_init(&o);
    if (options) CKPT__TAKE_OPTIONS(&o, options);
    if (dry_run) o.dry_run = 1;
    /* The source's blocks the destination's format cannot hold, that no
     * rule asked a block type of, are written as f32
     * (ckpt_plan_dequantize_for); a destination its rule refuses is left
     * for the writer to name. */
    ckpt_format format;
    int directory;
    ckpt_error unresolved;
    if (ckpt_destination_resolve(dst_path, &o, &format, &directory, &unresolved) == CKPT_OK &&
        (st = ckpt_plan_dequantize_for(p, format, err)))
        return st;
    ckpt_writer *w;
    ckpt__move *moves;
    size_t n, used = 0;
    if ((st = ckpt__convert_writer(p, dst_path, &o, &w, err))) return st;
    if ((st = ckpt__convert_moves(p, &moves, &n, err))) {
        ckpt_writer_free(w);
        return st;
    }
    for (size_t k = 0; k < n; k++) /* what the writer keeps */
        if (!ckpt_writer_tensor_kept(w, moves[k].writer_index)) moves[used++] = moves[k];
    *w_out = w, *moves_out = moves, *used_out = used;
    return CKPT_OK;
}

ckpt_status ckpt_convert_plan(ckpt_plan *p, const char *dst_path, const ckpt_writer_options *options,
                              ckpt_error *err) {
    ckpt_writer_options o;
    ckpt_writer_options_init(&o);
    if (options) CKPT__TAKE_OPTIONS(&o, options);
    ckpt_writer *w;
    ckpt__move *moves;
    size_t used;
    ckpt_status st = declare(p, dst_path, options, false, &w, &moves, &used, err);
    if (st) return st;
    if (o.dry_run) { /* checked and planned; nothing to write */
        st = ckpt_writer_commit(w, err);
        ckpt_writer_free(w);
        free(moves);
        return st;
    }
    ckpt__engine_options eo = {.io = CKPT_IO_BUFFERED, .progress = o.progress, .user = o.user, .writer = w,
                               .ordered = ckpt__writer_needs_order(w), .check_crc = !o.skip_crc_check};
    st = write_generated(p, w, err);
    if (st == CKPT_OK) st = ckpt__engine_run(p->catalog, moves, used, &eo, NULL, err);
    if (st == CKPT_OK) st = ckpt_writer_commit(w, err);
    ckpt_writer_free(w);
    free(moves);
    return st;
}

ckpt_status ckpt_convert_plan_preview(ckpt_plan *p, const char *dst_path, const ckpt_writer_options *options,
                                      ckpt_writer **out, ckpt_error *err) {
    if (!out) return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, dst_path, NULL, -1, "writer is required");
    *out = NULL;
    ckpt_writer *w;
    ckpt__move *moves;
    size_t used;
    ckpt_status st = declare(p, dst_path, options, true, &w, &moves, &used, err);
    if (st) return st;
    free(moves);
    st = ckpt_writer_commit(w, err); /* a dry run's: names the index */
    if (st) {
        ckpt_writer_free(w);
        return st;
    }
    *out = w;
    return CKPT_OK;
}
