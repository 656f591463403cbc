/* writer_internal.h — what the conversions (convert.c, load.c) may do with a
 * writer beyond the public API: positional writes and kernel copies. */
#ifndef CKPT_WRITER_INTERNAL_H
#define CKPT_WRITER_INTERNAL_H

#include "base/base.h"
#include "ckpt_dcp.h"
#include "ckpt_gguf.h"
#include "base/value.h"
#include "io/file.h"
#include "io/source.h"

/* Copies of the options only one output format reads (writer options'
 * `gguf` and `dcp`): the caller's may go away before the writer does. */
typedef struct ckpt__format_options {
    ckpt_gguf_writer_options gguf;
    ckpt_dcp_writer_options dcp;
} ckpt__format_options;
/* Copies o's format options into `own` and points o at the copies (each a
 * format's defaults where none was given), so that formats read them
 * without a NULL check. */
CKPT__HIDDEN void ckpt__writer_take_format_options(ckpt_writer_options *o, ckpt__format_options *own);

/* Tensor bytes [at, at + n) at their place in the output file.  Threads
 * may write different ranges at once; with checksums a tensor's bytes must
 * arrive in order. */
CKPT__HIDDEN ckpt_status ckpt__writer_pwrite(ckpt_writer *w, size_t index, uint64_t at, const void *data, size_t n,
                                             ckpt_error *err);

/* Where in its output file tensor byte `at` lies (0 for a tensor
 * deduplicated away or an index out of range): for a caller that cuts its
 * writes on the file's pages. */
CKPT__HIDDEN uint64_t ckpt__writer_file_offset(const ckpt_writer *w, size_t index, uint64_t at);

/* Written data starts its write-back at once and leaves the page cache
 * once it is on disk (sync_file_range, POSIX_FADV_DONTNEED): a catalog
 * opened with `direct`, a collective save, the `write_back` option. */
CKPT__HIDDEN void ckpt__writer_drop_behind(ckpt_writer *w);

/* The folder the writer's files go in. */
CKPT__HIDDEN const char *ckpt__writer_folder(const ckpt_writer *w);

/* A tensor whose XXH3-64 (and its chunks', as many as it has) the caller
 * knows: recorded as its digests, so that ckpt__writer_pcopy may feed a
 * writer that keeps checksums (ckpt_writer_copy_tensor, copy_range).
 * `nbytes` must be its declared size. */
CKPT__HIDDEN ckpt_status ckpt__writer_give_digest(ckpt_writer *w, size_t index, uint64_t nbytes, uint64_t xxh3,
                                                 const uint64_t *chunks, size_t count, ckpt_error *err);

/* The bytes tensor `index` has received so far (where its next ones go). */
CKPT__HIDDEN uint64_t ckpt__writer_tensor_written(const ckpt_writer *w, size_t index);
/* Its declared size. */
CKPT__HIDDEN uint64_t ckpt__writer_tensor_nbytes(const ckpt_writer *w, size_t index);

/* Tensor bytes [at, at + n) copied by the kernel from a local source (no
 * checksums, unless the tensor's digest was given). */
CKPT__HIDDEN ckpt_status ckpt__writer_pcopy(ckpt_writer *w, size_t index, uint64_t at, ckpt__source *src,
                                            uint64_t src_offset, uint64_t n, ckpt_error *err);

/* The dtype (a torch name: "bfloat16") that config.json, copied along
 * (copy_files_from), gets: a conversion cast every float tensor to it.
 * `dtype` must outlive the writer; before ckpt_writer_begin. */
CKPT__HIDDEN void ckpt__writer_set_config_dtype(ckpt_writer *w, const char *dtype);

/* An arena that lives as long as the writer. */
CKPT__HIDDEN ckpt__arena *ckpt__writer_arena(ckpt_writer *w);
/* Hands the object tree over as values (tree_internal.h's keys): an
 * output that writes it as objects (torch.save, DCP) walks it
 * (ckpt__out_tree); one that keeps metadata as text gets its JSON, written
 * once, when it asks (ckpt__out_checkpoint_metadata).  `tree` must live
 * as long as the writer. */
CKPT__HIDDEN ckpt_status ckpt__writer_set_tree(ckpt_writer *w, const char *key, const ckpt__value *tree,
                                               ckpt_error *err);
/* A metadata entry whose value is encoded (a GGUF source's typed
 * key-value: gguf.h), the checkpoint's own when `own`, else every file's;
 * it must live as long as the writer.  The output of its format copies
 * it; one that keeps metadata as text gets its JSON (ckpt__pairs_text). */
/* Key `key` set to `value` (the caller's, living as long as the writer):
 * in place where an entry has the key, else a new entry of every file's —
 * as writer option metadata_json's entries are. */
CKPT__HIDDEN ckpt_status ckpt__writer_override_metadata_value(ckpt_writer *w, const char *key,
                                                              const ckpt__encoded *value, ckpt_error *err);
CKPT__HIDDEN ckpt_status ckpt__writer_set_metadata_value(ckpt_writer *w, const char *key, const ckpt__encoded *value,
                                                         bool own, ckpt_error *err);
/* A file written into the output directory with the tensors' files and
 * committed with them (GGUF → Hugging Face's config.json); declared before
 * ckpt_writer_begin; the bytes are copied.  CKPT_E_INVALID_ARGUMENT when
 * the output is no directory. */
CKPT__HIDDEN ckpt_status ckpt__writer_add_file(ckpt_writer *w, const char *name, const void *data, size_t len,
                                               ckpt_error *err);
/* Whether a conversion from a source of this format carries its metadata
 * into the output (ckpt_writer_options.source_metadata). */
CKPT__HIDDEN bool ckpt__writer_takes_metadata_of(const ckpt_writer *w, ckpt_format source);

/* Whether each tensor's bytes must arrive in order (the output format
 * hashes them as they stream). */
CKPT__HIDDEN bool ckpt__writer_needs_order(const ckpt_writer *w);

/* ---- collective writes: other processes write into this writer's files ---- */

/* A begun writer's layout for other processes: its output path, its files'
 * names, temporary paths and sizes, and each tensor's file, offset, size. */
CKPT__HIDDEN ckpt_status ckpt__writer_join_encode(const ckpt_writer *w, ckpt__buf *out, ckpt_error *err);

/* A writer over another process's begun writer, from its layout (bytes
 * from another process: every field checked).  With `open_files` its
 * temporaries are opened for writing (never created).  Positional writes
 * (ckpt__writer_pwrite, pcopy) work; commit is refused; free closes the
 * files and removes nothing. */
CKPT__HIDDEN ckpt_status ckpt__writer_join(const void *data, size_t n, bool open_files, ckpt_writer **out,
                                           ckpt_error *err);

/* Other processes write this writer's tensors too: commit does not count
 * bytes (the processes have agreed that every byte is there). */
/* Other processes write tensors too (collective saves and converts).
 * Refused, naming the format, for an output format whose finish needs
 * data only one process sees (CRC-32s of the tensors' bytes: DCP, npz). */
CKPT__HIDDEN ckpt_status ckpt__writer_set_shared(ckpt_writer *w, ckpt_error *err);

/* Where tensor `index`'s bytes begin in its file (after begin). */
CKPT__HIDDEN uint64_t ckpt__writer_tensor_offset(const ckpt_writer *w, size_t index);

/* A collective save's bytes made durable before the vote, on every rank:
 * the files this process wrote fsynced (with `sync`; `*synced` counts
 * them).  Each rank syncs what it wrote, as a network file system needs
 * (one client's fsync does not flush another's cache).  A joined writer's
 * files are then closed and the writer is done; the creator's stay open
 * for its commit, whose fsyncs then find them clean. */
CKPT__HIDDEN ckpt_status ckpt__writer_sync_written(ckpt_writer *w, bool sync, uint64_t *synced, ckpt_error *err);
#endif
