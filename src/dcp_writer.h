/* dcp_writer.h — the DCP output of ckpt_writer (see dcp_writer.c): the
 * writer's public functions call these when options->format is
 * CKPT_FORMAT_DCP. */
#ifndef CKPT_DCP_WRITER_H
#define CKPT_DCP_WRITER_H

#include "base/base.h"
#include "io/file.h"
#include "io/source.h"

typedef struct ckpt__dcp_writer ckpt__dcp_writer;

CKPT__HIDDEN ckpt_status ckpt__dcp_writer_create(const char *path, uint32_t ranks, bool overwrite, bool no_sync,
                                                 ckpt__dcp_writer **out, ckpt_error *err);
CKPT__HIDDEN ckpt_status ckpt__dcp_writer_add_tensor(ckpt__dcp_writer *w, const char *name, ckpt_dtype dtype,
                                                     uint32_t ndim, const uint64_t *shape, size_t *index,
                                                     ckpt_error *err);
/* The source's object tree (ckpt_catalog_tree_json): its non-tensor values
 * become DCP objects and its nesting planner_data paths. */
CKPT__HIDDEN ckpt_status ckpt__dcp_writer_set_tree(ckpt__dcp_writer *w, const char *json, ckpt_error *err);
CKPT__HIDDEN ckpt_status ckpt__dcp_writer_begin(ckpt__dcp_writer *w, ckpt_error *err);
/* Tensor bytes [at, at + n), from any thread, in any order (the writer
 * joins each chunk's CRC-32 at commit). */
CKPT__HIDDEN ckpt_status ckpt__dcp_writer_pwrite(ckpt__dcp_writer *w, size_t index, uint64_t at, const void *data,
                                                 size_t n, ckpt_error *err);
/* The next n bytes of a tensor (ckpt_writer_write). */
CKPT__HIDDEN ckpt_status ckpt__dcp_writer_write(ckpt__dcp_writer *w, size_t index, const void *data, size_t n,
                                                ckpt_error *err);
/* Bytes [at, at + n) read from `src` (through a buffer: the CRC needs them). */
CKPT__HIDDEN ckpt_status ckpt__dcp_writer_pcopy(ckpt__dcp_writer *w, size_t index, uint64_t at, ckpt__source *src,
                                                uint64_t src_offset, uint64_t n, ckpt_error *err);
CKPT__HIDDEN ckpt_status ckpt__dcp_writer_commit(ckpt__dcp_writer *w, ckpt_error *err);
CKPT__HIDDEN size_t ckpt__dcp_writer_file_count(const ckpt__dcp_writer *w);
CKPT__HIDDEN const char *ckpt__dcp_writer_file_path(const ckpt__dcp_writer *w, size_t i);
CKPT__HIDDEN size_t ckpt__dcp_writer_tensor_file(const ckpt__dcp_writer *w, size_t index);
CKPT__HIDDEN uint64_t ckpt__dcp_writer_total_bytes(const ckpt__dcp_writer *w);
CKPT__HIDDEN void ckpt__dcp_writer_free(ckpt__dcp_writer *w);

#endif
