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

/* One chunk of a tensor, as declared (before it is checked). */
typedef struct ckpt__dcp_chunk {
    const uint64_t *offsets; /* ndim */
    const uint64_t *sizes;   /* ndim */
    const char *file;        /* where its data lies, for messages */
} ckpt__dcp_chunk;

/*
 * Checks that `count` chunks tile a tensor of `shape`: every chunk inside
 * the tensor (CKPT_E_DCP_CHUNK_BOUNDS), no two sharing an element
 * (CKPT_E_DCP_CHUNK_OVERLAP), every element in one (CKPT_E_DCP_CHUNK_HOLE).
 * Errors name `path`, the tensor and the chunks.  Work: O(n log n) plus
 * the pairs of chunks that overlap along the axis with the most distinct
 * offsets.
 */
CKPT__HIDDEN ckpt_status ckpt__dcp_check_tiling(const char *path, const char *tensor, uint32_t ndim,
                                                const uint64_t *shape, const ckpt__dcp_chunk *chunks, size_t count,
                                                ckpt_error *err);

/* "[a, b, c]" of n numbers into buf (truncated with "…" to fit). */
CKPT__HIDDEN const char *ckpt__dcp_dims(char *buf, size_t cap, const uint64_t *v, uint32_t n);

/* The formats (registry.c). */
CKPT__HIDDEN extern const ckpt__format ckpt__format_dcp;    /* dcp.c: .metadata */
CKPT__HIDDEN extern const ckpt__format ckpt__format_dcp_hf; /* dcp_hf.c: DCP_SHARDING_INFO safetensors */

#endif
