/*
 * llama.h — the llama family as convert_hf_to_gguf.py converts it
 * (conversion/llama.py's LlamaModel over TextModel, llama-cpp-python
 * 0.3.36's vendored llama.cpp): its key-values in the order the script
 * adds them, its tensors' names, and the Q/K rows it reorders.
 */
#ifndef CKPT_FORMATS_LLAMACPP_LLAMA_H
#define CKPT_FORMATS_LLAMACPP_LLAMA_H

#include "arch.h"

/* LlamaModel converts Mistral alike (conversion/llama.py registers it). */
static const char *const ckpt__lc_llama_archs[] = {"LlamaForCausalLM", "LLaMAForCausalLM", "MistralForCausalLM", NULL};

static const ckpt__lc_kv ckpt__lc_llama_kvs[] = {
    /* TextModel.set_gguf_parameters */
    {"%s.block_count", CKPT__LC_U32, "n_layers|num_hidden_layers|n_layer|num_layers", true},
    {"%s.context_length", CKPT__LC_U32,
     "max_position_embeddings|n_ctx|n_positions|max_length|max_sequence_length|model_max_length", false},
    {"%s.embedding_length", CKPT__LC_U32, "hidden_size|n_embd|dim", false},
    {"%s.feed_forward_length", CKPT__LC_U32,
     "prefix_dense_intermediate_size|dense_intermediate_size|intermediate_size|n_inner|hidden_dim", false},
    {"%s.attention.head_count", CKPT__LC_U32, "num_attention_heads|n_head|n_heads", false},
    {"%s.attention.head_count_kv", CKPT__LC_U32, "num_key_value_heads|n_kv_heads", false},
    {"%s.rope.freq_base", CKPT__LC_ROPE_THETA,
     "global_rope_theta|rope_global_theta|rope_theta_global|rope_theta|rotary_emb_base", false},
    {"%s.attention.layer_norm_rms_epsilon", CKPT__LC_F32, "rms_norm_eps|norm_eps", false},
    {"%s.attention.layer_norm_epsilon", CKPT__LC_F32, "layer_norm_eps|layer_norm_epsilon|norm_epsilon", false},
    {"%s.attention.key_length", CKPT__LC_U32, "head_dim", false},
    {"%s.attention.value_length", CKPT__LC_U32, "head_dim", false},
    {"general.file_type", CKPT__LC_FILE_TYPE, NULL, true},
    /* LlamaModel.set_gguf_parameters */
    {"%s.vocab_size", CKPT__LC_U32, "vocab_size", true},
    {"%s.rope.dimension_count", CKPT__LC_ROPE_DIM, NULL, true},
    {NULL, 0, NULL, false},
};

static const ckpt__lc_tensor ckpt__lc_llama_tensors[] = {
    {"model.embed_tokens.weight", "token_embd.weight", CKPT__LC_NO_PERMUTE, 2, {CKPT__LC_VOCAB, CKPT__LC_HIDDEN}},
    {"lm_head.weight", "output.weight", CKPT__LC_NO_PERMUTE, 2, {CKPT__LC_VOCAB, CKPT__LC_HIDDEN}},
    {"model.norm.weight", "output_norm.weight", CKPT__LC_NO_PERMUTE, 1, {CKPT__LC_HIDDEN}},
    {"model.layers.%u.input_layernorm.weight", "blk.%u.attn_norm.weight", CKPT__LC_NO_PERMUTE, 1, {CKPT__LC_HIDDEN}},
    {"model.layers.%u.self_attn.q_proj.weight", "blk.%u.attn_q.weight", CKPT__LC_PERMUTE_Q, 2,
     {CKPT__LC_Q, CKPT__LC_HIDDEN}},
    {"model.layers.%u.self_attn.k_proj.weight", "blk.%u.attn_k.weight", CKPT__LC_PERMUTE_K, 2,
     {CKPT__LC_KV, CKPT__LC_HIDDEN}},
    {"model.layers.%u.self_attn.v_proj.weight", "blk.%u.attn_v.weight", CKPT__LC_NO_PERMUTE, 2,
     {CKPT__LC_KV, CKPT__LC_HIDDEN}},
    {"model.layers.%u.self_attn.o_proj.weight", "blk.%u.attn_output.weight", CKPT__LC_NO_PERMUTE, 2,
     {CKPT__LC_HIDDEN, CKPT__LC_Q}},
    {"model.layers.%u.post_attention_layernorm.weight", "blk.%u.ffn_norm.weight", CKPT__LC_NO_PERMUTE, 1,
     {CKPT__LC_HIDDEN}},
    {"model.layers.%u.mlp.gate_proj.weight", "blk.%u.ffn_gate.weight", CKPT__LC_NO_PERMUTE, 2,
     {CKPT__LC_FF, CKPT__LC_HIDDEN}},
    {"model.layers.%u.mlp.up_proj.weight", "blk.%u.ffn_up.weight", CKPT__LC_NO_PERMUTE, 2,
     {CKPT__LC_FF, CKPT__LC_HIDDEN}},
    {"model.layers.%u.mlp.down_proj.weight", "blk.%u.ffn_down.weight", CKPT__LC_NO_PERMUTE, 2,
     {CKPT__LC_HIDDEN, CKPT__LC_FF}},
    {NULL, NULL, CKPT__LC_NO_PERMUTE, 0, {CKPT__LC_ANY}},
};

/* Llama 3's pre-tokenizer (the script's "llama-bpe"). */
static const ckpt__lc_pre ckpt__lc_llama_pres[] = {
    {"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
     "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
     "llama-bpe"},
    {NULL, NULL},
};

static const ckpt__lc_family ckpt__lc_llama = {
    .name = "llama",
    .hf_archs = ckpt__lc_llama_archs,
    .kvs = ckpt__lc_llama_kvs,
    .tensors = ckpt__lc_llama_tensors,
    .pres = ckpt__lc_llama_pres,
};

#endif
