/*
 * qwen2.h — the qwen2 family as convert_hf_to_gguf.py converts it
 * (conversion/qwen.py's Qwen2Model over TextModel, llama-cpp-python
 * 0.3.36's vendored llama.cpp): its key-values in the order the script
 * adds them and its tensors' names (biases on Q, K and V; no row
 * permutation).
 */
#ifndef CKPT_FORMATS_LLAMACPP_QWEN2_H
#define CKPT_FORMATS_LLAMACPP_QWEN2_H

#include "arch.h"

static const char *const ckpt__lc_qwen2_archs[] = {"Qwen2ForCausalLM", NULL};

/* TextModel's alone (Qwen2Model adds a pooling type only for a
 * sentence-transformers directory, modules.json: refused). */
static const ckpt__lc_kv ckpt__lc_qwen2_kvs[] = {
    CKPT__LC_TEXT_MODEL_KVS,
    {NULL, 0, NULL, false},
};

static const ckpt__lc_tensor ckpt__lc_qwen2_tensors[] = {
    CKPT__LC_DECODER_TENSORS,
    {"model.layers.%u.self_attn.q_proj.weight", "blk.%u.attn_q.weight", CKPT__LC_NO_PERMUTE, 2,
     {CKPT__LC_Q, CKPT__LC_HIDDEN}},
    {"model.layers.%u.self_attn.q_proj.bias", "blk.%u.attn_q.bias", CKPT__LC_NO_PERMUTE, 1, {CKPT__LC_Q}},
    {"model.layers.%u.self_attn.k_proj.weight", "blk.%u.attn_k.weight", CKPT__LC_NO_PERMUTE, 2,
     {CKPT__LC_KV, CKPT__LC_HIDDEN}},
    {"model.layers.%u.self_attn.k_proj.bias", "blk.%u.attn_k.bias", CKPT__LC_NO_PERMUTE, 1, {CKPT__LC_KV}},
    {"model.layers.%u.self_attn.v_proj.weight", "blk.%u.attn_v.weight", CKPT__LC_NO_PERMUTE, 2,
     {CKPT__LC_KV, CKPT__LC_HIDDEN}},
    {"model.layers.%u.self_attn.v_proj.bias", "blk.%u.attn_v.bias", CKPT__LC_NO_PERMUTE, 1, {CKPT__LC_KV}},
    {NULL, NULL, CKPT__LC_NO_PERMUTE, 0, {CKPT__LC_ANY}},
};

/* Qwen2's pre-tokenizer (the script's "qwen2"): Llama 3's with single digits. */
static const ckpt__lc_pre ckpt__lc_qwen2_pres[] = {
    {"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
     "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
     "qwen2"},
    {NULL, NULL},
};

static const ckpt__lc_family ckpt__lc_qwen2 = {
    .name = "qwen2",
    .hf_archs = ckpt__lc_qwen2_archs,
    .kvs = ckpt__lc_qwen2_kvs,
    .tensors = ckpt__lc_qwen2_tensors,
    .pres = ckpt__lc_qwen2_pres,
    .add_space_prefix = false,
};

#endif
