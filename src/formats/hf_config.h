/*
 * hf_config.h — a Hugging Face model directory's config.json
 * (transformers PretrainedConfig.to_json_file): what a conversion that
 * changes the weights must change in it.
 */
#ifndef CKPT_FORMATS_HF_CONFIG_H
#define CKPT_FORMATS_HF_CONFIG_H

#include "../base/base.h"

/* The file of a model directory that holds its configuration. */
#define CKPT__HF_CONFIG_NAME "config.json"
/* Larger files (not a configuration transformers writes) are copied as
 * they are. */
#define CKPT__HF_CONFIG_MAX_BYTES (16u << 20)

/*
 * config.json's text with its dtype set to `dtype` (a torch name such as
 * "bfloat16"): every "dtype" (transformers 5) or "torch_dtype" (before)
 * member, at any depth (a composite model's sub-configs), whose value is a
 * float dtype's name gets the new name; every other byte stays as it was
 * (key order, indentation, number spellings).  Appends the new text to
 * `out` and returns true; returns false, appending nothing, when the text
 * is not JSON or has no such member (nothing to change).
 */
CKPT__HIDDEN bool ckpt__hf_config_set_dtype(const char *text, size_t len, const char *dtype, ckpt__buf *out);

#endif
