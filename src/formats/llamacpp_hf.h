/* llamacpp_hf.h — what llamacpp_hf.c (a llama.cpp GGUF as a Hugging Face
 * directory) asks of its tokenizer's file. */
#ifndef CKPT_FORMATS_LLAMACPP_HF_H
#define CKPT_FORMATS_LLAMACPP_HF_H

#include "../base/base.h"

struct ckpt__lc_family;

/*
 * Adds tokenizer.json and tokenizer_config.json, made of the GGUF's
 * tokenizer.ggml.* key-values, to `plan`'s carried files
 * (llamacpp_hf_tokenizer.c), and for a SentencePiece vocabulary ("llama")
 * tokenizer.model, unless SentencePiece could not load it (a token twice
 * or empty, a type it does not have); `family` is general.architecture's
 * (llamacpp/arch.h: its token attributes llama.cpp sets by name).  A
 * file without tokenizer.ggml.model adds nothing; a tokenizer ckpt cannot
 * write, or key-values that contradict each other, are
 * CKPT_E_INVALID_ARGUMENT naming the file and the key.
 */
CKPT__HIDDEN ckpt_status ckpt__lc_hf_tokenizer(ckpt_plan *plan, const struct ckpt__lc_family *family,
                                               ckpt_error *err);

#endif
