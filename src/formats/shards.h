/*
 * shards.h — Hugging Face sharded checkpoints (huggingface_hub
 * serialization/_base.py and _torch.py): shard packing, file names and the
 * `*.index.json` file.
 */
#ifndef CKPT_FORMATS_SHARDS_H
#define CKPT_FORMATS_SHARDS_H

#include "../base/base.h"
#include "../base/json.h"

/* Limit on the size of an index file (huggingface_hub refuses > 10 MB;
 * ckpt allows more, still bounded). */
#define CKPT__INDEX_MAX_BYTES (100ULL * 1000 * 1000)

/*
 * Assigns each of `count` tensors (sizes in state-dict order) to a shard, as
 * split_state_dict_into_shards_factory does: greedy in order; a tensor
 * larger than the limit gets a shard of its own at once (numbered before
 * the shard still open); otherwise the open shard is closed when the tensor
 * would overflow it.  Writes shard numbers (from 0) to `shard_of` and
 * returns the number of shards (0 when count is 0).
 */
CKPT__HIDDEN size_t ckpt__shards_pack(const uint64_t *sizes, size_t count, uint64_t max_shard_size,
                                      uint32_t *shard_of);

/* "<prefix>-00001-of-00003.safetensors" (or "<prefix>.safetensors" when
 * `total` is 1) as a malloc'ed string. */
CKPT__HIDDEN char *ckpt__shard_file_name(const char *prefix, size_t index, size_t total);

/* True when `name` is a file that a sharded checkpoint with this prefix
 * would use: <prefix>(-NNNNN-of-NNNNN)?.safetensors(.index.json)? */
CKPT__HIDDEN bool ckpt__shards_is_own_file(const char *prefix, const char *name);

/* Whether a `__metadata__` key belongs to each file of a checkpoint rather
 * than to the checkpoint: "format", which save_torch_state_dict writes into
 * every shard, and ckpt's checksums of the file's own bytes.  The other
 * entries of a lone file (the caller's metadata, `removed → kept`) are
 * what the hub puts in the index when it shards. */
CKPT__HIDDEN bool ckpt__shards_file_key(const char *key);

/* A parsed index: the weight map in file order, and its distinct shard file
 * names in order of first appearance. */
typedef struct ckpt__index {
    size_t count;
    const char **names;   /* arena array of strings inside the text */
    uint32_t *file_of;    /* malloc'ed; index into files */
    size_t file_count;
    const char **files;   /* malloc'ed array of arena strings */
    size_t meta_count;    /* the "metadata" object's string entries (in the arena) */
    const char **meta_keys, **meta_values; /* arena arrays */
    bool total_parameters; /* the metadata counts parameters (transformers' save_pretrained) */
} ckpt__index;

/*
 * Parses an index.json document in place (`text` is modified and must
 * outlive `out`): an object with a "weight_map" object of string values and
 * an optional "metadata" object.  Shard names must be relative, without ".."
 * components.  Duplicate weight_map keys are refused.
 */
CKPT__HIDDEN ckpt_status ckpt__index_parse(char *text, size_t len, const char *path,
                                           ckpt__arena *arena, ckpt__index *out, ckpt_error *err);
CKPT__HIDDEN void ckpt__index_free(ckpt__index *index);

/*
 * Renders an index as huggingface_hub writes it (json.dump with indent=2,
 * ensure_ascii): {"metadata": {"total_size": N, <meta…>}, "weight_map": {...}}
 * with the weight map in the given order; with total_parameters (not NULL)
 * {"total_parameters": P, "total_size": N, …} as transformers' save_pretrained
 * writes it.
 */
CKPT__HIDDEN void ckpt__index_render(ckpt__buf *out, const uint64_t *total_parameters, uint64_t total_size,
                                     const char *const *meta_keys,
                                     const char *const *meta_values, size_t meta_count, const char *const *names,
                                     const char *const *files, size_t count);

#endif
