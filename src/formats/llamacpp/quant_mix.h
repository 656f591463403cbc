/*
 * quant_mix.h — llama-quantize's per-tensor mixes (Q4_K_S, Q4_K_M, Q5_K_S,
 * Q5_K_M, Q6_K) for the conversion of a Hugging Face model into the GGUF
 * file llama.cpp runs (llamacpp.c): which tensor becomes which block type,
 * as llama.cpp's src/llama-quant.cpp (llama_tensor_get_type) chooses it
 * for an f32 GGUF without an importance matrix, and the order llama-quantize
 * writes the tensors in.
 */
#ifndef CKPT_FORMATS_LLAMACPP_QUANT_MIX_H
#define CKPT_FORMATS_LLAMACPP_QUANT_MIX_H

#include "../../base/base.h"

/* What the mix reads of the model: llama.cpp's hyper-parameters. */
typedef struct ckpt__lc_mix_model {
    const char *arch; /* general.architecture */
    uint64_t n_layer, n_head, n_head_kv, n_expert;
} ckpt__lc_mix_model;

/* One tensor of the file, under llama.cpp's name. */
typedef struct ckpt__lc_mix_tensor {
    const char *name;
    uint32_t ndim;
    uint64_t row;   /* ggml's ne[0]: elements per row, Hugging Face's last axis */
    ckpt_dtype in;  /* its dtype in llama-quantize's input (an f32 file: F32) */
    ckpt_dtype out; /* set by ckpt__lc_mix_choose */
    size_t index;   /* the caller's, carried along */
} ckpt__lc_mix_tensor;

/* The mix's llama.cpp file type (general.file_type) for a name such as
 * "q4_k_m" (any case), or 0 when ckpt writes no such mix. */
CKPT__HIDDEN unsigned ckpt__lc_mix_from_name(const char *name);

/* Sorts the tensors into llama-quantize's order (llama_model_loader's
 * weights_map: by the layer of "blk.N.", tensors of no layer first, then
 * by name) and sets each one's `out` for file type `ftype`.  Fails, naming
 * `path` and the tensor, where llama-quantize fails: an expert model's
 * ffn tensor with no layer, or a layer past n_layer. */
CKPT__HIDDEN ckpt_status ckpt__lc_mix_choose(unsigned ftype, const ckpt__lc_mix_model *model, ckpt__lc_mix_tensor *t,
                                             size_t n, const char *path, ckpt_error *err);

#endif
