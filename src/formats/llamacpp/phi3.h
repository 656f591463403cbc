/*
 * phi3.h — the phi3 family as convert_hf_to_gguf.py converts it
 * (conversion/phi.py's Phi3MiniModel, llama-cpp-python 0.3.36's vendored
 * llama.cpp): its own key-values (no TextModel ones: Phi3MiniModel does
 * not call them) in the order the script adds them; Q, K and V fused into
 * attn_qkv and the gate and up projections into ffn_up, as they are (no
 * row permutation); Llama 2's SentencePiece vocabulary with Phi-3's
 * reading of the added tokens.  A long-context model's RoPE factors
 * (longrope: rope_factors_long/short, tensors the script makes) are
 * refused by RoPE type.
 */
#ifndef CKPT_FORMATS_LLAMACPP_PHI3_H
#define CKPT_FORMATS_LLAMACPP_PHI3_H

#include "arch.h"

static const char *const ckpt__lc_phi3_archs[] = {"Phi3ForCausalLM", NULL};

/* Phi3MiniModel.set_gguf_parameters */
static const ckpt__lc_kv ckpt__lc_phi3_kvs[] = {
    {"%s.context_length", CKPT__LC_U32, "n_positions|max_position_embeddings", true},
    {"%s.rope.scaling.original_context_length", CKPT__LC_ROPE_U32, "original_max_position_embeddings", true},
    {"%s.embedding_length", CKPT__LC_U32, "hidden_size|n_embd", true},
    {"%s.feed_forward_length", CKPT__LC_U32, "intermediate_size", true},
    {"%s.block_count", CKPT__LC_U32, "n_layers|num_hidden_layers|n_layer|num_layers", true},
    {"%s.attention.head_count", CKPT__LC_U32, "num_attention_heads|n_head", true},
    {"%s.attention.head_count_kv", CKPT__LC_U32, "num_key_value_heads|n_head_kv", true},
    {"%s.attention.layer_norm_rms_epsilon", CKPT__LC_F32, "rms_norm_eps", true},
    {"%s.rope.dimension_count", CKPT__LC_ROPE_DIM_PARTIAL, NULL, true},
    {"%s.rope.freq_base", CKPT__LC_ROPE_THETA, "rope_theta", true},
    {"general.file_type", CKPT__LC_FILE_TYPE, NULL, true},
    {"%s.attention.sliding_window", CKPT__LC_U32_OR_ZERO, "sliding_window", true},
    {NULL, 0, NULL, false},
};

static const ckpt__lc_tensor ckpt__lc_phi3_tensors[] = {
    {"model.embed_tokens.weight", "token_embd.weight", CKPT__LC_NO_PERMUTE, 2, {CKPT__LC_VOCAB, CKPT__LC_HIDDEN}},
    {"lm_head.weight", "output.weight", CKPT__LC_NO_PERMUTE, 2, {CKPT__LC_VOCAB, CKPT__LC_HIDDEN}},
    {"model.norm.weight", "output_norm.weight", CKPT__LC_NO_PERMUTE, 1, {CKPT__LC_HIDDEN}},
    {"model.layers.%u.input_layernorm.weight", "blk.%u.attn_norm.weight", CKPT__LC_NO_PERMUTE, 1, {CKPT__LC_HIDDEN}},
    {"model.layers.%u.self_attn.qkv_proj.weight", "blk.%u.attn_qkv.weight", CKPT__LC_NO_PERMUTE, 2,
     {CKPT__LC_QKV, CKPT__LC_HIDDEN}},
    {"model.layers.%u.self_attn.o_proj.weight", "blk.%u.attn_output.weight", CKPT__LC_NO_PERMUTE, 2,
     {CKPT__LC_HIDDEN, CKPT__LC_Q}},
    {"model.layers.%u.post_attention_layernorm.weight", "blk.%u.ffn_norm.weight", CKPT__LC_NO_PERMUTE, 1,
     {CKPT__LC_HIDDEN}},
    {"model.layers.%u.mlp.gate_up_proj.weight", "blk.%u.ffn_up.weight", CKPT__LC_NO_PERMUTE, 2,
     {CKPT__LC_FF2, CKPT__LC_HIDDEN}},
    {"model.layers.%u.mlp.down_proj.weight", "blk.%u.ffn_down.weight", CKPT__LC_NO_PERMUTE, 2,
     {CKPT__LC_HIDDEN, CKPT__LC_FF}},
    {NULL, NULL, CKPT__LC_NO_PERMUTE, 0, {CKPT__LC_ANY}},
};

/* No BPE pre-tokenizer: Phi-4's GPT2Tokenizer (tokenizer.json alone) is refused. */
static const ckpt__lc_pre ckpt__lc_phi3_pres[] = {
    {NULL, NULL},
};

/* llama.cpp's Phi-3 rule (llama-vocab.cpp, by general.name: "phi-3" or
 * "phi3"): its special tokens strip the spaces after them, </s> too, but
 * <unk>, <s> and <|endoftext|>, as Phi-3's tokenizer_config.json flags its
 * chat tokens rstrip. */
static const char *const ckpt__lc_phi3_rstrip_names[] = {"phi-3", "phi3", NULL};
static const char *const ckpt__lc_phi3_rstrip_also[] = {"</s>", NULL};
static const char *const ckpt__lc_phi3_rstrip_except[] = {"<unk>", "<s>", "<|endoftext|>", NULL};
static const ckpt__lc_rstrip ckpt__lc_phi3_rstrip = {
    .names = ckpt__lc_phi3_rstrip_names, .also = ckpt__lc_phi3_rstrip_also, .except = ckpt__lc_phi3_rstrip_except};

static const ckpt__lc_family ckpt__lc_phi3 = {
    .name = "phi3",
    .hidden_act = "silu",
    .hf_archs = ckpt__lc_phi3_archs,
    .kvs = ckpt__lc_phi3_kvs,
    .tensors = ckpt__lc_phi3_tensors,
    .pres = ckpt__lc_phi3_pres,
    .add_space_prefix = false,
    .spm_added = CKPT__LC_SPM_PHI3,
    .rstrip = &ckpt__lc_phi3_rstrip,
};

#endif
