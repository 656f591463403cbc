/*
 * qwen.h — the Qwen families as convert_hf_to_gguf.py converts them
 * (conversion/qwen.py, llama-cpp-python 0.3.36's vendored llama.cpp):
 * qwen2 (Qwen2Model over TextModel) and qwen3 (Qwen3Model over Qwen2Model):
 * their key-values in the order the script adds them and their tensors'
 * names (biases on Q, K and V where the model has them; no row
 * permutation; qwen3's Q and K norms).
 */
#ifndef CKPT_FORMATS_LLAMACPP_QWEN_H
#define CKPT_FORMATS_LLAMACPP_QWEN_H

#include "arch.h"

static const char *const ckpt__lc_qwen2_archs[] = {"Qwen2ForCausalLM", NULL};

/* TextModel's alone (Qwen2Model adds a pooling type only for a
 * sentence-transformers directory, modules.json: refused). */
static const ckpt__lc_kv ckpt__lc_qwen2_kvs[] = {
    CKPT__LC_TEXT_MODEL_KVS,
    {NULL, 0, NULL, false},
};

/* Qwen's attention: Q, K and V, with biases where the model has them. */
#define CKPT__LC_QWEN_ATTENTION_TENSORS                                                                           \
    {"model.layers.%u.self_attn.q_proj.weight", "blk.%u.attn_q.weight", CKPT__LC_NO_PERMUTE, 2,                    \
     {CKPT__LC_Q, CKPT__LC_HIDDEN}},                                                                               \
    {"model.layers.%u.self_attn.q_proj.bias", "blk.%u.attn_q.bias", CKPT__LC_NO_PERMUTE, 1, {CKPT__LC_Q}},         \
    {"model.layers.%u.self_attn.k_proj.weight", "blk.%u.attn_k.weight", CKPT__LC_NO_PERMUTE, 2,                    \
     {CKPT__LC_KV, CKPT__LC_HIDDEN}},                                                                              \
    {"model.layers.%u.self_attn.k_proj.bias", "blk.%u.attn_k.bias", CKPT__LC_NO_PERMUTE, 1, {CKPT__LC_KV}},        \
    {"model.layers.%u.self_attn.v_proj.weight", "blk.%u.attn_v.weight", CKPT__LC_NO_PERMUTE, 2,                    \
     {CKPT__LC_KV, CKPT__LC_HIDDEN}},                                                                              \
    {"model.layers.%u.self_attn.v_proj.bias", "blk.%u.attn_v.bias", CKPT__LC_NO_PERMUTE, 1, {CKPT__LC_KV}}

static const ckpt__lc_tensor ckpt__lc_qwen2_tensors[] = {
    CKPT__LC_DECODER_TENSORS,
    CKPT__LC_QWEN_ATTENTION_TENSORS,
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

/* Qwen3Model: Qwen2Model's key-values and tensors, with RMS norms of Q and
 * K per head.  A reranker (the script's _is_qwen3_reranker: adds a pooling
 * type and a classifier head) is refused by its hints. */
static const char *const ckpt__lc_qwen3_archs[] = {"Qwen3ForCausalLM", NULL};

static const ckpt__lc_tensor ckpt__lc_qwen3_tensors[] = {
    CKPT__LC_DECODER_TENSORS,
    CKPT__LC_QWEN_ATTENTION_TENSORS,
    {"model.layers.%u.self_attn.q_norm.weight", "blk.%u.attn_q_norm.weight", CKPT__LC_NO_PERMUTE, 1,
     {CKPT__LC_HEAD}},
    {"model.layers.%u.self_attn.k_norm.weight", "blk.%u.attn_k_norm.weight", CKPT__LC_NO_PERMUTE, 1,
     {CKPT__LC_HEAD}},
    {NULL, NULL, CKPT__LC_NO_PERMUTE, 0, {CKPT__LC_ANY}},
};

static const ckpt__lc_family ckpt__lc_qwen3 = {
    .name = "qwen3",
    .hf_archs = ckpt__lc_qwen3_archs,
    .kvs = ckpt__lc_qwen2_kvs,
    .tensors = ckpt__lc_qwen3_tensors,
    .pres = ckpt__lc_qwen2_pres,
    .add_space_prefix = false,
    .refused_hint = "qwen3-reranker",
};

#endif
