/*
 * ckpt_dcp.h — what is torch.distributed.checkpoint's (DCP's) own in
 * libckpt's interface: the options of DCP output.
 *
 * Reading a DCP directory (its .metadata and the ranks' .distcp files, or
 * DCP's Hugging Face storage layer), its tensors' chunks
 * (ckpt_catalog_chunk) and writing DCP (ckpt_writer_options.format
 * CKPT_FORMAT_DCP) go through <ckpt.h>, which this header includes.
 */
#ifndef CKPT_DCP_H
#define CKPT_DCP_H

#include "ckpt.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Given as ckpt_writer_options.dcp when DCP is written.  Zero-initialise
 * it and set `size` (ckpt_dcp_writer_options_init).
 */
typedef struct ckpt_dcp_writer_options {
    size_t size; /* sizeof(ckpt_dcp_writer_options) */
    /* The number of ranks that appear to have saved it (0 means 1), each
     * with its own `__<rank>_0.distcp` file.  A tensor with at least that
     * many rows is cut along its first axis as DTensor's Shard(0) cuts it
     * (ceil(rows / ranks) rows each); smaller tensors, scalars and the
     * non-tensor values of a torch file's object tree are written once, by
     * rank 0. */
    uint32_t ranks;
} ckpt_dcp_writer_options;

static inline void ckpt_dcp_writer_options_init(ckpt_dcp_writer_options *options) {
    *options = (ckpt_dcp_writer_options){0};
    options->size = sizeof *options;
}

#ifdef __cplusplus
}
#endif

#endif /* CKPT_DCP_H */
