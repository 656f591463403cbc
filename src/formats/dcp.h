/*
 * dcp.h — PyTorch distributed checkpoints (torch.distributed.checkpoint,
 * "DCP"; pytorch torch/distributed/checkpoint/metadata.py, filesystem.py,
 * hf_storage.py, _hf_utils.py).
 *
 * A DCP directory holds `.metadata` — a pickle (protocol 4) of
 *
 *   Metadata(state_dict_metadata = {fqn: TensorStorageMetadata(properties,
 *                                          size, chunks=[ChunkStorageMetadata(offsets, sizes)])
 *                                        | BytesStorageMetadata()},
 *            planner_data = {fqn: (path, in, the, nested, dict)},
 *            storage_data = {MetadataIndex(fqn, offset): _StorageInfo(relative_path, offset, length
 *                                                                     [, transform_descriptors])},
 *            storage_meta = StorageMeta(checkpoint_id = PosixPath(...), save_id, …),
 *            version = "1.0.0")
 *
 * — and the ranks' `__<rank>_<n>.distcp` files, in which each item at
 * (offset, length) is a complete torch.save archive holding one chunk (a
 * tensor of the chunk's sizes) or one object (BytesStorageMetadata: step
 * counters, hyper-parameters, RNG state).  ckpt reads the pickle with an
 * allowlist of exactly the globals torch writes there, each of which may
 * only be made the way torch makes it (NEWOBJ of the dataclasses and BUILD
 * of their plain state; REDUCE of torch.Size, the memory-format enum,
 * torch.serialization._get_layout and pathlib.PosixPath), and each item's
 * archive with torch's reader on a window of its file.  A tensor becomes
 * one catalog tensor whose pieces are its chunks, after checking that the
 * chunks tile it (no hole, no overlap, nothing out of bounds) and that each
 * archive holds what its chunk declares.
 *
 * The Hugging Face storage layer (HuggingFaceStorageWriter with
 * save_distributed=True) writes instead one safetensors file per rank,
 * `shard-<rank+1>-model-<i>-of-<n>.safetensors`, holding the rank's chunks
 * as whole tensors and, in `__metadata__`, DCP_SHARDING_INFO: the JSON
 * {fqn: {"saved_offsets": [...]}}.  Its tensors' sizes are the largest
 * offset + size per axis, as torch's reader computes them.
 */
#ifndef CKPT_FORMATS_DCP_H
#define CKPT_FORMATS_DCP_H

#include "../base/base.h"
#include "format.h"
#include "../base/value.h"

/* One chunk of a tensor, as declared (before it is checked). */
typedef struct ckpt__dcp_chunk {
    const uint64_t *offsets; /* ndim */
    const uint64_t *sizes;   /* ndim */
    const char *file;        /* where its data lies, for messages */
} ckpt__dcp_chunk;

/*
 * Checks that `count` chunks tile a tensor of `shape`: every chunk inside
 * the tensor (CKPT__D(DCP_CHUNK_BOUNDS)), no two sharing an element
 * (CKPT__D(DCP_CHUNK_OVERLAP)), every element in one (CKPT__D(DCP_CHUNK_HOLE)).
 * Errors name `path`, the tensor and the chunks.  Work: O(n log n) plus
 * the pairs of chunks that overlap along the axis with the most distinct
 * offsets.
 */
CKPT__HIDDEN ckpt_status ckpt__dcp_check_tiling(const char *path, const char *tensor, uint32_t ndim,
                                                const uint64_t *shape, const ckpt__dcp_chunk *chunks, size_t count,
                                                ckpt_error *err);

/* "[a, b, c]" of n numbers into buf (truncated with "…" to fit). */
CKPT__HIDDEN const char *ckpt__dcp_dims(char *buf, size_t cap, const uint64_t *v, uint32_t n);

/* ---- writing (dcp_write.c) --------------------------------------------------- */

/*
 * A torch.save archive around one item, laid out as torch.save lays it out
 * (records data.pkl, .format_version, .storage_alignment, byteorder,
 * data/0, version, .data/serialization_id; data 64-byte aligned in the
 * archive; sizes and CRC-32s in data descriptors; ZIP64 end records).
 * For a chunk, `head` holds the bytes before data/0's `nbytes` of data and
 * ckpt__dcp_archive_tail renders those after it once its CRC is known; an
 * object's archive is all in `head`.
 */
typedef struct ckpt__dcp_archive {
    ckpt__buf head;
    uint64_t size;   /* the whole archive */
    uint64_t nbytes; /* data/0's data */
    ckpt__buf pickle;
    uint64_t id;     /* .data/serialization_id, as 40 decimal digits */
    bool has_data;
} ckpt__dcp_archive;

/* torch.save(tensor) for a dense tensor of `sizes` and `dtype`. */
CKPT__HIDDEN ckpt_status ckpt__dcp_chunk_archive(ckpt__dcp_archive *a, ckpt_dtype dtype, uint32_t ndim,
                                                 const uint64_t *sizes, uint64_t nbytes, uint64_t id);
CKPT__HIDDEN ckpt_status ckpt__dcp_archive_tail(const ckpt__dcp_archive *a, uint32_t crc, ckpt__buf *tail);

/* torch.save(object) for a value of ckpt's object tree (the schema of
 * ckpt_catalog_tree_json): None, bools, ints, floats, strings, bytes,
 * lists, tuples, sets, dicts.  Tensors inside, and objects of classes, are
 * refused naming `fqn`. */
CKPT__HIDDEN ckpt_status ckpt__dcp_object_archive(ckpt__dcp_archive *a, const ckpt__value *object, const char *fqn,
                                                  uint64_t id, ckpt_error *err);
CKPT__HIDDEN void ckpt__dcp_archive_free(ckpt__dcp_archive *a);

/* One part of a planner_data path: a dict key, or (key NULL) a list index. */
typedef struct ckpt__dcp_path_part {
    const char *key;
    uint64_t index;
} ckpt__dcp_path_part;

/* Where an item's archive lies. */
typedef struct ckpt__dcp_stored {
    const char *relative_path;
    uint64_t offset, length;
} ckpt__dcp_stored;

typedef struct ckpt__dcp_out_chunk {
    const uint64_t *offsets, *sizes;
    ckpt__dcp_stored stored;
} ckpt__dcp_out_chunk;

/* One entry of state_dict_metadata: a tensor (chunk_count ≥ 1) or an
 * object (chunk_count 0, stored in `object`). */
typedef struct ckpt__dcp_item_meta {
    const char *fqn;
    const ckpt__dcp_path_part *path;
    uint32_t path_len;
    ckpt_dtype dtype;
    uint32_t ndim;
    const uint64_t *shape;
    uint32_t chunk_count;
    const ckpt__dcp_out_chunk *chunks;
    ckpt__dcp_stored object;
} ckpt__dcp_item_meta;

/* The .metadata pickle (protocol 4) of these entries, as torch's
 * FileSystemWriter.finish pickles Metadata: the same classes built the same
 * way, deterministic (no save_id, no checkpoint path). */
CKPT__HIDDEN ckpt_status ckpt__dcp_render_metadata(const ckpt__dcp_item_meta *items, size_t count, ckpt__buf *out);

/* The formats (registry.c). */
CKPT__HIDDEN extern const ckpt__format ckpt__format_dcp;    /* dcp.c: .metadata */
CKPT__HIDDEN extern const ckpt__format ckpt__format_distcp; /* dcp.c: a .distcp opened alone, refused with advice */
CKPT__HIDDEN extern const ckpt__format ckpt__format_dcp_hf; /* dcp_hf.c: DCP_SHARDING_INFO safetensors */

#endif
