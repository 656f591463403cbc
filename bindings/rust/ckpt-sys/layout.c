/* layout.c — what the C compiler says about the structs that src/lib.rs
 * declares: sizes and field offsets, in the order of LAYOUT in src/lib.rs's
 * test.  Compiled by build.rs against the real ckpt.h. */
#include <stddef.h>

#include "ckpt.h"
#include "ckpt_dcp.h"
#include "ckpt_gguf.h"

#define F(type, field) offsetof(type, field)

static const size_t layout[] = {
    sizeof(ckpt_error), F(ckpt_error, status), F(ckpt_error, detail), F(ckpt_error, sys_errno), F(ckpt_error, offset),
    F(ckpt_error, path), F(ckpt_error, tensor), F(ckpt_error, message),

    F(ckpt_tensor_info, name), F(ckpt_tensor_info, dtype), F(ckpt_tensor_info, ndim), F(ckpt_tensor_info, shape),
    F(ckpt_tensor_info, numel), F(ckpt_tensor_info, nbytes), F(ckpt_tensor_info, file), F(ckpt_tensor_info, offset),
    F(ckpt_tensor_info, strides), F(ckpt_tensor_info, storage), F(ckpt_tensor_info, big_endian),
    F(ckpt_tensor_info, compressed),

    F(ckpt_plan_item, name), F(ckpt_plan_item, source), F(ckpt_plan_item, dtype), F(ckpt_plan_item, ndim),
    F(ckpt_plan_item, shape), F(ckpt_plan_item, numel), F(ckpt_plan_item, nbytes), F(ckpt_plan_item, slice_start),
    F(ckpt_plan_item, slice_count), F(ckpt_plan_item, perm), F(ckpt_plan_item, data), F(ckpt_plan_item, is_view),
    F(ckpt_plan_item, transform),

    sizeof(ckpt_catalog_options), F(ckpt_catalog_options, size), F(ckpt_catalog_options, allowed_globals),
    F(ckpt_catalog_options, allowed_global_count), F(ckpt_catalog_options, connect_timeout_ms),
    F(ckpt_catalog_options, read_timeout_ms), F(ckpt_catalog_options, retries), F(ckpt_catalog_options, max_connections),
    F(ckpt_catalog_options, bearer_token), F(ckpt_catalog_options, cache_dir), F(ckpt_catalog_options, io),

    sizeof(ckpt_writer_options), F(ckpt_writer_options, size), F(ckpt_writer_options, max_shard_size), F(ckpt_writer_options, prefix),
    F(ckpt_writer_options, overwrite), F(ckpt_writer_options, no_sync), F(ckpt_writer_options, checksums),
    F(ckpt_writer_options, copy_partial_views), F(ckpt_writer_options, format), F(ckpt_writer_options, copy_files_from),
    F(ckpt_writer_options, gguf), F(ckpt_writer_options, metadata_json),
    F(ckpt_writer_options, dcp),
    F(ckpt_writer_options, dry_run), F(ckpt_writer_options, total_parameters), F(ckpt_writer_options, skip_crc_check),
    F(ckpt_writer_options, source_metadata), F(ckpt_writer_options, exact_file),
    F(ckpt_writer_options, progress), F(ckpt_writer_options, user), F(ckpt_writer_options, write_back),
    sizeof(ckpt_memory_source), F(ckpt_memory_source, size),
    sizeof(ckpt_verify_options), F(ckpt_verify_options, progress), F(ckpt_verify_options, user),
    sizeof(ckpt_verify_report), F(ckpt_verify_report, tensor_digests), F(ckpt_verify_report, tensors), F(ckpt_verify_report, file_sha256),
    F(ckpt_verify_report, chunk_digests),

    sizeof(ckpt_gguf_writer_options), F(ckpt_gguf_writer_options, split_max_tensors),
    sizeof(ckpt_dcp_writer_options), F(ckpt_dcp_writer_options, ranks),

    sizeof(ckpt_tensor_storage), F(ckpt_tensor_storage, id), F(ckpt_tensor_storage, nbytes),
    F(ckpt_tensor_storage, begin), F(ckpt_tensor_storage, end), F(ckpt_tensor_storage, contiguous),

    sizeof(ckpt_load_options), F(ckpt_load_options, size), F(ckpt_load_options, threads), F(ckpt_load_options, chunk_bytes),
    F(ckpt_load_options, io_uring), F(ckpt_load_options, views),
    F(ckpt_load_options, progress), F(ckpt_load_options, user), F(ckpt_load_options, item_done),
    F(ckpt_load_options, item_done_user), F(ckpt_load_options, skip_crc_check),

    sizeof(ckpt_load_stats), F(ckpt_load_stats, bytes_needed), F(ckpt_load_stats, bytes_read),
    F(ckpt_load_stats, reads), F(ckpt_load_stats, tasks), F(ckpt_load_stats, threads),
    F(ckpt_load_stats, ring_bytes), F(ckpt_load_stats, direct), F(ckpt_load_stats, io_uring),
    F(ckpt_load_stats, views),

    sizeof(ckpt_expected), F(ckpt_expected, name), F(ckpt_expected, dtype), F(ckpt_expected, ndim),
    F(ckpt_expected, shape),

    F(ckpt_match_entry, kind), F(ckpt_match_entry, name), F(ckpt_match_entry, expected), F(ckpt_match_entry, item),

    sizeof(ckpt_status), sizeof(ckpt_detail), sizeof(ckpt_dtype), sizeof(ckpt_format), sizeof(ckpt_io_mode),
    CKPT_DTYPE_COUNT, CKPT_MAX_DIMS,
    sizeof(ckpt_value_kind), CKPT_VALUE_NULL, CKPT_VALUE_BOOL, CKPT_VALUE_INT, CKPT_VALUE_FLOAT, CKPT_VALUE_NUMBER,
    CKPT_VALUE_STRING, CKPT_VALUE_BYTES, CKPT_VALUE_BIGINT, CKPT_VALUE_TENSOR, CKPT_VALUE_GLOBAL, CKPT_VALUE_LIST,
    CKPT_VALUE_TUPLE, CKPT_VALUE_SET, CKPT_VALUE_CALL, CKPT_VALUE_DICT, CKPT_VALUE_OBJECT,
};

size_t ckpt_sys_layout_count(void);
size_t ckpt_sys_layout(size_t i);

size_t ckpt_sys_layout_count(void) { return sizeof layout / sizeof *layout; }
size_t ckpt_sys_layout(size_t i) { return i < sizeof layout / sizeof *layout ? layout[i] : (size_t)-1; }
